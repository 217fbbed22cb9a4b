//go:build !race

package inbox_test

const raceDetector = false
