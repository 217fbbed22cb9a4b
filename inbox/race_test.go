//go:build race

package inbox_test

// raceDetector: the race detector slows every access many times over, so
// rates measured under it say nothing of the code's.
const raceDetector = true
