package main

import (
	"math"
	"testing"
)

// Pairs that CI soaks of the lock forms found (2026-11-29), and where a
// restart must fall to explain them.
func TestOverlapSpansRestart(t *testing.T) {
	// Advisory, a9cb32c: one handling ran 3 s; a second began 0.3 s after
	// the database restart began, inside it (the restart took 2.3 s).
	inside := overlap{seq: 1686, aStart: 1795966923163981, aSeen: 1795966926168159, bStart: 1795966925665889, bSeen: 1795966925709677}
	// Advisory, ce7de5e: the first handling began 27 ms after the restart's
	// start was read, while the server was ending its sessions (they ended
	// at 42.081); the second began 0.29 s later.
	during := overlap{seq: 1853, aStart: 1795972842027180, aSeen: 1795972845028222, bStart: 1795972842320370, bSeen: 1795972842459071}
	for _, tc := range []struct {
		name string
		o    overlap
		r    restart
		want bool
	}{
		{"while a ran, before b began", inside, restart{1795966925370000, 1795966927700000}, true},
		{"the same, not yet back", inside, restart{1795966925370000, math.MaxInt64}, true},
		{"before a began, back before it too", inside, restart{1795966920000000, 1795966922300000}, false},
		{"after b began", inside, restart{1795966925700000, 1795966928000000}, false},
		{"after both", inside, restart{1795966926500000, 1795966928800000}, false},
		{"a began while sessions were ending", during, restart{1795972842000000, 1795972844400000}, true},
		{"a began after the database was back", during, restart{1795972841000000, 1795972842010000}, false},
		{"a began more than a second after the start", during, restart{1795972840900000, math.MaxInt64}, false},
	} {
		if got := tc.o.spans(tc.r); got != tc.want {
			t.Errorf("%s: spans = %v, want %v", tc.name, got, tc.want)
		}
	}
}
