package dialect

import (
	"context"
	"sync/atomic"
)

// Writer hands SQLite's one write lock to one broker's writers in turn.
// When two connections write at once the second meets SQLITE_BUSY, and the
// engine's busy handler sleeps (1, 2, 5, 10 ms and longer) before it tries
// again; writers that first queue here are handed the lock the moment it is
// free. Only a statement that runs on its own (autocommit) takes its turn
// here: one inside the caller's transaction must not, since that
// transaction may already hold SQLite's lock while the turn's holder waits
// for it. Writers that do not take turns here (the user's own statements,
// another broker, another process) still meet the busy timeout. On
// Postgres, and on a nil Writer, Lock and Unlock do nothing.
type Writer struct {
	turn  chan struct{} // nil on Postgres
	turns atomic.Uint64 // turns taken, for the broker's checkpoints
}

// NewWriter returns the writers' turn of one broker on engine d.
func NewWriter(d *Dialect) *Writer {
	if d.Kind != SQLite {
		return &Writer{}
	}
	return &Writer{turn: make(chan struct{}, 1)}
}

// Lock waits for the turn to write, or for ctx to end.
func (w *Writer) Lock(ctx context.Context) error {
	if w == nil || w.turn == nil {
		return nil
	}
	w.turns.Add(1)
	select {
	case w.turn <- struct{}{}:
		return nil
	default:
	}
	select {
	case w.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Takes says writers take turns here (SQLite).
func (w *Writer) Takes() bool { return w != nil && w.turn != nil }

// Idle says no writer holds the turn at this moment (one that waits for
// it would hold it already).
func (w *Writer) Idle() bool { return w == nil || len(w.turn) == 0 }

// Turns is how many turns were asked for so far (0 on Postgres).
func (w *Writer) Turns() uint64 {
	if w == nil {
		return 0
	}
	return w.turns.Load()
}

// Unlock ends the turn.
func (w *Writer) Unlock() {
	if w != nil && w.turn != nil {
		<-w.turn
	}
}
