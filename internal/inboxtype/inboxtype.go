// Package inboxtype holds the types that package inbox shows its users and
// the engine and the claim forms work with, each defined once (River's
// rivertype is the example): inbox aliases them, so the engine reports an
// Event without a copy, and a cause such as ErrHoldLost is one value
// wherever it was made, so errors.Is holds across the packages.
//
// It is internal: users name these types through package inbox, the one
// door of the API, and no module outside this one has to implement against
// them.
package inboxtype

import (
	"errors"
	"time"
)

// The causes a handler's context ends with (context.Cause).
var (
	// ErrTimeout: the handler ran past its subscription's Timeout.
	ErrTimeout = errors.New("inbox: handler timed out")
	// ErrLeaseLost: the row's lease was taken over (the handler ran past
	// it and it could not be extended); its ack will change nothing.
	ErrLeaseLost = errors.New("inbox: lease lost")
	// ErrHoldLost: the connection that held the row ended (row-lock and
	// advisory forms); the row is free for another claimer.
	ErrHoldLost = errors.New("inbox: the connection holding the row ended")
	// ErrCanceled: an operator canceled the row (Operator.Cancel); the
	// cause is a *CancelCause.
	ErrCanceled = errors.New("inbox: canceled by an operator")
)

// CancelCause is the cause a canceled handler's context ends with: it is
// ErrCanceled (errors.Is), and says what becomes of the row.
type CancelCause struct {
	// Delete: the row is deleted, not parked.
	Delete bool
	// Reason is the operator's, "" when none was given.
	Reason string
}

// Error is the text recorded as the parked row's last error.
func (c *CancelCause) Error() string {
	s := ErrCanceled.Error()
	if c.Reason != "" {
		s += ": " + c.Reason
	}
	return s
}

// Unwrap makes a CancelCause ErrCanceled.
func (c *CancelCause) Unwrap() error { return ErrCanceled }

// Outcome is how a handling ended.
type Outcome string

// The outcomes an Event reports.
const (
	Acked    Outcome = "acked"    // handled; the row is deleted
	Retried  Outcome = "retried"  // failed; the row comes back after a backoff
	Parked   Outcome = "parked"   // failed its last attempt, or its handler asked; the row is set aside
	Snoozed  Outcome = "snoozed"  // its handler asked to come back later; no attempt used
	Lost     Outcome = "lost"     // the lease or hold was lost; the outcome changed nothing
	Released Outcome = "released" // claimed at shutdown and given back unstarted
	Failed   Outcome = "failed"   // the settlement itself failed (Err says why); the row comes back after its lease
	Canceled Outcome = "canceled" // an operator canceled it (Err is a *CancelCause); the row is parked, or deleted where the cancel asked
)

// Event is one handling of one row.
type Event struct {
	Subscription string
	ID           int64
	// Attempt is this handling's attempt: the row's claims so far, this
	// one included, as the claim counted them in the attempts column (a
	// claim whose process died counts too; a snooze or a release gives its
	// attempt back). 1 where the table has no attempts column.
	Attempt    int
	Start, End time.Time
	Outcome    Outcome
	// Err is the handler's error, nil when it succeeded; for Failed, the
	// settlement's error too.
	Err error
}

// Stats counts what a subscription has done since it started.
type Stats struct {
	Claims   int64 // claim statements sent
	Claimed  int64 // rows claimed
	Acked    int64
	Retried  int64
	Parked   int64
	Snoozed  int64
	Lost     int64 // rows whose lease or hold was lost while in work
	Released int64 // rows given back unstarted (at shutdown; a claim's spare rows also at a pause, or when one waited two thirds of its lease)
	Failed   int64 // settlements that failed (the row comes back after its lease)
	Canceled int64 // rows canceled by an operator while in work, parked or deleted
	// LimitRefused counts rows a claim took whose key value had no slot
	// of its Limit or Rate left when they asked (claimers racing for the last
	// slot): given back unstarted, their attempt returned. Rows of a
	// value whose slots were taken before the claim are not taken at all.
	LimitRefused int64
	// PickupFallback says why rows other processes write wait for the poll
	// although notifications were asked for (Broker.Pickup); "" when not.
	PickupFallback string
}
