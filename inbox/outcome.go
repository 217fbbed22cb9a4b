package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/engine"
	"github.com/sqlinbox/sqlinbox/internal/inboxtype"
)

// Handler handles one row. Returning nil acknowledges (deletes) the row;
// an error, or a panic, makes it a retry after a backoff, and a row whose
// MaxAttempts-th attempt fails is parked. A handler picks another outcome
// by returning RetryAfter (a delay of its choosing), Park (no more
// attempts) or Snooze (come back later without using an attempt).
type Handler[T any] func(ctx context.Context, row T) error

// RetryError is a handler's request to try its row again after Delay,
// recording Err (which may be nil) as its last error. Middleware can find
// it with errors.As.
type RetryError struct {
	Delay time.Duration
	Err   error
}

// RetryAfter asks for the row to be tried again after delay, recording err
// (which may be nil) as its last error. The attempt counts toward
// MaxAttempts like any failure.
func RetryAfter(delay time.Duration, err error) error {
	return &RetryError{Delay: delay, Err: err}
}

func (e *RetryError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("retry after %v", e.Delay)
	}
	return fmt.Sprintf("retry after %v: %v", e.Delay, e.Err)
}
func (e *RetryError) Unwrap() error { return e.Err }

// ParkError is a handler's request to park its row now, whatever attempts
// are left: for input that will never succeed. Err is kept as the row's
// last error.
type ParkError struct{ Err error }

// Park asks for the row to be parked now, with err as its last error: it
// is never claimed again until inbox.Unpark brings it back.
func Park(err error) error { return &ParkError{Err: err} }

func (e *ParkError) Error() string {
	if e.Err == nil {
		return "parked by its handler"
	}
	return "parked by its handler: " + e.Err.Error()
}
func (e *ParkError) Unwrap() error { return e.Err }

// SnoozeError is a handler's request to come back to its row after Delay
// without using an attempt: the row's attempts and last error stay as they
// were before the claim.
type SnoozeError struct{ Delay time.Duration }

// Snooze asks for the row to be handled again after d, without counting
// this attempt toward MaxAttempts.
func Snooze(d time.Duration) error { return &SnoozeError{Delay: d} }

func (e *SnoozeError) Error() string { return fmt.Sprintf("snoozed for %v", e.Delay) }

// ErrLeaseLost is the cause of a handler's context when its row's lease was
// taken over (it ran past its lease and could not extend it): its ack will
// change nothing, and the row is someone else's now.
var ErrLeaseLost = inboxtype.ErrLeaseLost

// ErrHoldLost is the cause of a handler's context when the connection that
// held its row ended (row-lock and advisory forms: a terminated backend, a
// database restart, a network cut): the row is free for another claimer,
// and the handler's outcome will change nothing. A settlement that failed
// for that reason wraps it too, so errors.Is(Event.Err, ErrHoldLost) holds.
var ErrHoldLost = inboxtype.ErrHoldLost

// ErrTimeout is the cause of a handler's context when it ran past Timeout.
var ErrTimeout = inboxtype.ErrTimeout

// ErrCanceled is the cause of a handler's context when an operator canceled
// its row (Operator.Cancel, inbox cancel, the dashboard's Cancel): the
// cause is a *CancelCause, which is ErrCanceled to errors.Is. Whatever the
// handler returns then, its row is parked with the cancel as its last
// error, or deleted where the cancel asked; the Event's Outcome is
// Canceled.
var ErrCanceled = inboxtype.ErrCanceled

// CancelCause is the cause a canceled handler's context ends with:
//
//	type CancelCause struct {
//		Delete bool   // the row is deleted, not parked
//		Reason string // the operator's, "" when none was given
//	}
type CancelCause = inboxtype.CancelCause

// Outcome is how a handling ended: one of Acked, Retried, Parked, Snoozed,
// Lost, Released, Failed or Canceled.
type Outcome = inboxtype.Outcome

// The outcomes an Event reports.
const (
	Acked    Outcome = inboxtype.Acked    // handled; the row is deleted
	Retried  Outcome = inboxtype.Retried  // failed; the row comes back after a backoff
	Parked   Outcome = inboxtype.Parked   // failed its last attempt, or its handler asked; the row is set aside
	Snoozed  Outcome = inboxtype.Snoozed  // its handler asked to come back later; no attempt used
	Lost     Outcome = inboxtype.Lost     // the lease or hold was lost; the outcome changed nothing
	Released Outcome = inboxtype.Released // claimed at shutdown and given back unstarted
	Failed   Outcome = inboxtype.Failed   // the settlement itself failed (Err says why); the row comes back after its lease
	Canceled Outcome = inboxtype.Canceled // an operator canceled it (Err is a *CancelCause); the row is parked, or deleted where the cancel asked
)

// Event is one handling of one row, reported to Observe and to
// Hooks.Handled:
//
//	type Event struct {
//		Subscription string
//		ID           int64
//		// Attempt is this handling's attempt: the row's claims so far, this
//		// one included, as the claim counted them in the attempts column (a
//		// claim whose process died counts too; a snooze or a release gives its
//		// attempt back). 1 where the table has no attempts column.
//		Attempt    int
//		Start, End time.Time
//		Outcome    Outcome
//		// Err is the handler's error, nil when it succeeded; for Failed, the
//		// settlement's error too.
//		Err error
//	}
type Event = inboxtype.Event

// DefaultBackoff is one second doubled per failure, capped at MaxBackoff.
// A subscription without a Backoff option waits that less a jitter of up
// to a quarter (see Backoff).
func DefaultBackoff(failures int) time.Duration { return engine.DefaultBackoff(failures, MaxBackoff) }

// errorVerdict tells the engine what a handler's error asks for.
func errorVerdict(err error) (engine.Verdict, time.Duration) {
	var (
		se *SnoozeError
		pe *ParkError
		re *RetryError
	)
	switch {
	case errors.As(err, &se):
		return engine.Snooze, se.Delay
	case errors.As(err, &pe):
		return engine.Park, 0
	case errors.As(err, &re):
		return engine.RetryAfter, re.Delay
	}
	return engine.Retry, 0
}
