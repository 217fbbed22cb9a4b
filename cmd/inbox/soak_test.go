package main

import "testing"

// The pair a CI soak of the advisory form found (2026-11-29): one handling
// ran 3 s; a second began 0.3 s after the database restart began, inside
// it. Only a restart inside the first span and before the second's start
// explains it.
func TestOverlapSpansRestart(t *testing.T) {
	o := overlap{seq: 1686, aStart: 1795966923163981, aSeen: 1795966926168159, bStart: 1795966925665889, bSeen: 1795966925709677}
	for _, tc := range []struct {
		restartUS int64
		want      bool
	}{
		{1795966925370000, true},  // while a ran, before b began
		{1795966920000000, false}, // before a began
		{1795966925700000, false}, // after b began
		{1795966926500000, false}, // after both
	} {
		if got := o.spans(tc.restartUS); got != tc.want {
			t.Errorf("restart at %d: spans = %v, want %v", tc.restartUS, got, tc.want)
		}
	}
}
