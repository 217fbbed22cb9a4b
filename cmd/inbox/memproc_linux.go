package main

import (
	"bytes"
	"os"
	"strconv"
)

// procStatusKB reads one "Name:  N kB" line of /proc/self/status.
func procStatusKB(name string) (int64, bool) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for line := range bytes.Lines(b) {
		rest, ok := bytes.CutPrefix(line, []byte(name+":"))
		if !ok {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) == 0 {
			return 0, false
		}
		n, err := strconv.ParseInt(string(f[0]), 10, 64)
		return n, err == nil
	}
	return 0, false
}

// rssMB is the process's resident set now (VmRSS).
func rssMB() (float64, bool) {
	kb, ok := procStatusKB("VmRSS")
	return float64(kb) / 1024, ok
}

// peakRSSMB is the process's peak resident set since it started or since
// the last resetPeakRSS (VmHWM).
func peakRSSMB() (float64, bool) {
	kb, ok := procStatusKB("VmHWM")
	return float64(kb) / 1024, ok
}

// resetPeakRSS sets the peak resident set to the present one (Linux 4.0
// and later: "5" to clear_refs), so that the peak of one phase of the
// bench is read apart from the phase before it.
func resetPeakRSS() bool {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}
