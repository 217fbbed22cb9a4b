package schedule

import (
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// MaxErrorText is how many bytes of a failed run's error are kept in the
// schedule tables for operators; a longer text is cut at a character
// boundary and ends in "…".
const MaxErrorText = 1000

// tally is what an instance tells operators about one schedule in its
// heartbeat: its runs and failures since it started, and the last failure.
type tally struct {
	mu        sync.Mutex
	runs      int64
	failures  int64
	lastErr   string
	lastErrAt time.Time
}

// add counts a run that returned err at now.
func (t *tally) add(err error, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.runs++
	if err != nil {
		t.failures++
		t.lastErr, t.lastErrAt = errorText(err), now
	}
}

// beatArgs are Beat's parameters after the first four: spec, placement,
// next moment, runs, failures, the last error and its time.
func (s *Scheduler) beatArgs(e *entry, now time.Time) []any {
	var next any
	if m := e.moments.next(now); !m.IsZero() {
		next = s.times.Encode(m)
	}
	e.tally.mu.Lock()
	defer e.tally.mu.Unlock()
	var lastErr, lastErrAt any
	if !e.tally.lastErrAt.IsZero() {
		lastErr, lastErrAt = e.tally.lastErr, s.times.Encode(e.tally.lastErrAt)
	}
	return []any{e.spec.String(), e.placement.String(), next, e.tally.runs, e.tally.failures, lastErr, lastErrAt}
}

// errorText is err's text for the tables: at most MaxErrorText bytes, and
// valid UTF-8, which a Postgres text column requires.
func errorText(err error) string {
	text := err.Error()
	if len(text) <= MaxErrorText {
		return strings.ToValidUTF8(text, "\uFFFD")
	}
	cut := MaxErrorText - len("…")
	for cut > 0 && !utf8.RuneStart(text[cut]) {
		cut--
	}
	return strings.ToValidUTF8(text[:cut], "\uFFFD") + "…"
}
