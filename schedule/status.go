package schedule

import (
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
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

// beatCall is the heartbeat of e's schedule at now, with what operators
// read: spec, placement, next moment, runs, failures and the last error.
func (s *Scheduler) beatCall(e *entry, now time.Time) dialect.Call {
	next := e.moments.next(now)
	e.tally.mu.Lock()
	defer e.tally.mu.Unlock()
	return s.sql.Beat.Call(e.name, s.name, e.runners(), now, s.ttl, e.spec.String(), e.placement.String(), next,
		e.tally.runs, e.tally.failures, e.tally.lastErr, e.tally.lastErrAt)
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
