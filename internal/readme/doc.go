// Package readme holds nothing but tests: the Go and SQL samples of
// README.md and of the guides in docs/, compiled and run, and the test that
// keeps each such block a verbatim excerpt of a test file, so a sample
// cannot drift from the code.
package readme
