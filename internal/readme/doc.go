// Package readme holds nothing but tests: the README's Go samples, compiled
// and run, and the test that keeps each Go block of README.md a verbatim
// excerpt of a test file, so a sample cannot drift from the code.
package readme
