//go:build !linux

package main

// Elsewhere the bench reports only the whole process's peak (getrusage).

func rssMB() (float64, bool)            { return 0, false }
func peakRSSMB() (float64, bool)        { return 0, false }
func resetPeakRSS() bool                { return false }
func procStatusKB(string) (int64, bool) { return 0, false }
