// Package contract is the part of the claim forms' contract that the
// engine drives them by: a Claimer takes rows for free workers and declares
// its Traits, and each claimed Job is settled once through its Settler.
// It imports no database driver and nothing of the dialect, so the engine
// that reads it does not either (go list -deps ./internal/engine names no
// driver); package internal/claim adds what forms are built from and names
// these types too.
package contract

import (
	"context"
	"errors"
	"time"
)

// Claimer takes rows for free workers.
type Claimer interface {
	// Claim takes up to max available rows (max is at most the form's
	// ClaimLimit, where it has one), each held by this claimer until its Job is
	// settled. Fewer than max means the table had no more to give right
	// now. A claim of several statements that fails after one took rows
	// returns those rows with the error.
	Claim(ctx context.Context, max int) ([]*Job, error)
	// Traits declares what the claim loop needs to know of the form.
	Traits() Traits
	// Held is how many pool connections the form holds for jobs in work.
	Held() int
}

// Adopter is a Claimer that can take as its own a row this process leased
// outside a claim: a step a handler published After its own row, written
// already leased in the handler's transaction (the lease form). The step
// goes to the next free worker with no claim, and so with no second commit
// to wait for.
type Adopter interface {
	// Adopt reads such a row as a claim returns it (scan reads the
	// statement's one row) and makes its Job; nothing is counted in work
	// until Adopted, as the transaction may yet roll back.
	Adopt(scan func(dest ...any) error) (*Job, error)
	// Adopted counts jobs Adopt made, whose transaction committed, in
	// work.
	Adopted(jobs []*Job)
}

// Traits are what a form declares to the claim loop that drives it, so the
// loop never asks which form it drives.
type Traits struct {
	// RowsPerClaim is the most rows one claim takes; zero means one for
	// every free worker asked for. Where writers run side by side
	// (ConcurrentWriters) a form with a bound (any RowsPerClaim but zero,
	// not only one) gets claims in flight side by side, each for up to
	// RowsPerClaim free workers, as many as the connections allow (Conns,
	// less those Held); a form of zero gets one claim in flight, which
	// gathers free workers. With one writer (SQLite) every form gets one
	// claim in flight.
	RowsPerClaim int
	// ClaimLimit is the most rows a claim of any size may ask for (the
	// limit the claim statement locks within); zero is no limit.
	ClaimLimit int
	// ConcurrentWriters says the form's database takes writes from
	// several connections at once and flushes each commit (Postgres; the
	// dialect answers): claims may run side by side, a claim under a
	// backlog waits for all free workers, and a claim may take spare rows.
	// SQLite has one writer, and commits without a flush: there none of
	// that paid.
	ConcurrentWriters bool
	// HoldExpires says the hold is a lease written in the row: it runs out
	// unless Extend moves it, and the loop extends it while the handler
	// runs and tells the handler when it ran out. A hold that does not
	// expire lasts as long as its connection (see Holder).
	HoldExpires bool
	// SideBySide says Claim may be called while another claim of the same
	// claimer runs. A form of RowsPerClaim zero keeps one claim in flight,
	// but where its round trip is long and claims take spare rows, a
	// second goes out beside it (see the engine's farClaims).
	SideBySide bool
	// PinsConnection says jobs in work hold pool connections (Held counts
	// them): the end of each settlement may free one, so the loop is told
	// of every settlement, not only of the points where a claim waits for them.
	PinsConnection bool
}

// Settler settles one claimed row. Exactly one of Ack, Retry, Park or
// Release is called for each job.
type Settler interface {
	// Ack deletes the row. The form bounds its own statements: the
	// subscription acks with a context that has no deadline, so that a
	// job's ack costs no timer (lease and advisory acks run in batches
	// under a timeout of their own; row lock bounds its delete, and its
	// commit, which database/sql gives no context, waits on the server).
	Ack(ctx context.Context) error
	// Retry makes the row available again after delay, keeping lastError
	// where the table has that column. The attempt was counted by the
	// claim.
	Retry(ctx context.Context, delay time.Duration, lastError string) error
	// Park sets the row aside for good (locked_until = never): visible, never
	// claimed again until a person or program releases it.
	Park(ctx context.Context, lastError string) error
	// Snooze makes the row available again after delay and gives back the
	// attempt its claim counted.
	Snooze(ctx context.Context, delay time.Duration) error
	// Release gives back a row that was claimed but never started, with
	// the attempt its claim counted.
	Release(ctx context.Context) error
	// Extend moves the row's lease to now+lease; forms whose hold does not
	// expire do nothing.
	Extend(ctx context.Context, lease time.Duration) error
}

// AsyncAcker is a Settler that acks without the caller waiting: AckAsync
// queues the ack and returns, and done is called once with what Ack would
// have returned, on a goroutine of the form's own, which done must not
// hold up. A form that batches its acks implements it, so no goroutine
// waits a statement per job.
type AsyncAcker interface {
	AckAsync(done func(error))
}

// Forgetter is a Settler told that its job will never be settled: its
// lease was lost while the handler ran, and the row is someone else's now.
type Forgetter interface {
	Forget()
}

// Holder is a Settler whose hold can end without its holder's doing: the
// row lock's transaction or the advisory lock's session ends with its
// connection (a terminated backend, a restart, a network cut). Hold's
// context ends, with inboxtype.ErrHoldLost as its cause, once the form sees the
// connection end; from then on another claimer may take the row.
type Holder interface {
	Hold() context.Context
}

// ErrLost is returned when a row's lease was taken over or the row is gone:
// the holder no longer holds it and its settlement changed nothing.
var ErrLost = errors.New("claim lost: the row's lease was taken over or the row is gone")

// Job is one claimed row.
type Job struct {
	ID int64
	// Lease is the row's locked_until as this claim wrote it (the fencing
	// value of the lease form), or as it read it (zero when NULL).
	Lease time.Time
	// Attempts is the attempts column as the claim left it: the claims of
	// the row so far, this one included (a claim counts its attempt, so a
	// holder that dies has it counted too); zero where the table has none.
	Attempts int
	// Value is the user's row, as Table.New made and the claim filled it.
	Value any
	// Err is set when the row could not be read into the user's type (a
	// NULL in a non-nullable field, say): the job fails with it without
	// running the handler, so it is retried and parked like any failure
	// instead of stalling every claim that meets it.
	Err error
	// Key is the row's key value as text where its subscription has a
	// limit per key (Keyed false when the key is NULL: the row is not
	// limited).
	Key   string
	Keyed bool
	// RateKey is Key for the subscription's rate per key, which may read
	// another column.
	RateKey   string
	RateKeyed bool
	Settler
}

// SettleTimeout bounds a settlement, or a give-back, that a stop must not
// cut short: the engine's, and the forms' own statements.
const SettleTimeout = 30 * time.Second

// FarRoundTrip is the least round trip of the database itself (a ping, not
// a claim: on loopback under load a claim of 1000 rows took as long as one
// across 5 ms each way) from which a subscription keeps a second claim in
// flight and a lease claimer a second ack statement. On loopback two or
// three claims in flight were measured slower than one.
const FarRoundTrip = time.Millisecond

// DeepRescans is how many Rescans pass between floor reads from the
// table's start (see claim.Mark), and how many polls between a poller's
// probes from there.
const DeepRescans = 60
