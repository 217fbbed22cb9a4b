// Package claim is the contract the three claim forms share: a Claimer takes
// rows of an inbox table for free workers, and each claimed Job is settled
// once, by ack, retry, park, snooze or release. Forms live in claim/lease,
// claim/rowlock and claim/advisory; the engine (internal/engine) drives
// whichever one a subscription picks, reading what it needs to know of a
// form from its Traits.
//
// The contract is internal: a form is written against the dialect's SQL and
// table types (internal/dialect) and the subscription's connection budget,
// which are not a stable API, so no form outside this module could be
// written against it honestly. The public package claim names only Form,
// the value a user picks a form by.
package claim

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// Claimer takes rows for free workers.
type Claimer interface {
	// Claim takes up to max available rows (max is at most
	// dialect.MaxClaim), each held by this claimer until its Job is
	// settled. Fewer than max means the table had no more to give right
	// now. A claim of several statements that fails after one took rows
	// returns those rows with the error.
	Claim(ctx context.Context, max int) ([]*Job, error)
	// Traits declares what the claim loop needs to know of the form.
	Traits() Traits
	// Held is how many pool connections the form holds for jobs in work.
	Held() int
}

// Traits are what a form declares to the claim loop that drives it, so the
// loop never asks which form it drives.
type Traits struct {
	// RowsPerClaim is the most rows one claim takes; zero means one for
	// every free worker asked for. On Postgres a form with a bound (any
	// RowsPerClaim but zero, not only one) gets claims in flight side by
	// side, each for up to RowsPerClaim free workers, as many as the
	// connections allow (Conns, less those Held); a form of zero gets one
	// claim in flight, which gathers free workers. On SQLite every form
	// gets one claim in flight.
	RowsPerClaim int
	// HoldExpires says the hold is a lease written in the row: it runs out
	// unless Extend moves it, and the loop extends it while the handler
	// runs and tells the handler when it ran out. A hold that does not
	// expire lasts as long as its connection (see Holder).
	HoldExpires bool
	// PinsConnection says jobs in work hold pool connections (Held counts
	// them): the end of each settlement may free one, so the loop is told
	// of every settlement, not only of the points where it gathers.
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
	Settler
}

// Table is what every form needs to know of an inbox table.
type Table struct {
	dialect.Table
	// Unquoted is the table's name as the user gave it, for messages,
	// notification channels and advisory lock classes.
	Unquoted string
	Times    dialect.Times
	// New makes a fresh user value and appends the scan destinations for
	// Columns to dest.
	New func(dest []any) (value any, fields []any)
}

// Env is what a form gets from the subscription that drives it.
type Env struct {
	DB *sql.DB
	// Stmts runs the statements the lease form sends on every claim and
	// settlement, prepared once on SQLite (the broker's cache; nil makes the
	// form send the text). The Postgres-only forms use pgx's own cache.
	Stmts   *dialect.Stmts
	Dialect *dialect.Dialect
	Table   Table
	// SQL is shared by every subscription of the table: a copy in each
	// claimer was 1.7 kB of an idle group subscription's heap.
	SQL   *dialect.InboxSQL
	Clock clock.Clock
	// Group is the group claimed, nil for the whole table.
	Group any
	// Transactional: the subscription's handler runs in a transaction the
	// form may have to open on its hold's connection (see TxBeginner).
	Transactional bool
	// Lease is how long a claim holds a row in the lease form.
	Lease time.Duration
	// Rescan is the longest a form that starts its claims at a Mark (lease,
	// row lock) goes without looking from the start of the table again:
	// the poll interval.
	Rescan time.Duration
	// Conns is the most connections the form may hold at once, claims
	// included: the pool's size less one.
	Conns int
	// Writer is the broker's turn at SQLite's one write lock (see
	// dialect.Writer), shared by every subscription of a broker: a form
	// holds it across each write it sends on its own. Nil means none.
	Writer *dialect.Writer
	// Budget is shared by every subscription of a broker: a form takes a
	// unit before it takes a pool connection for a claim or a job in work,
	// and gives it back with the connection, so all subscriptions together
	// leave one connection for handlers, publishes and settlements.
	Budget *Budget
}

// Budget counts the pool connections a broker's claim forms hold.
type Budget struct{ slots chan struct{} }

// NewBudget returns a budget of n connections (at least one).
func NewBudget(n int) *Budget { return &Budget{slots: make(chan struct{}, max(n, 1))} }

// Acquire waits for a unit, or for ctx to end.
func (b *Budget) Acquire(ctx context.Context) error {
	select {
	case b.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Release gives a unit back.
func (b *Budget) Release() { <-b.slots }

// Form makes a Claimer for a subscription. It fails when the form cannot
// serve the database or the table.
type Form interface {
	// Name is the form's name in messages: "lease", "rowlock", "advisory".
	Name() string
	// Supports says why the form cannot serve the database, or nil.
	Supports(d *dialect.Dialect) error
	New(env Env) (Claimer, error)
}

// ScanJob reads one row of the shape every claim returns: id, locked_until,
// attempts, then the table's Columns. A row whose own columns scan but whose
// user fields do not comes back with Err set; only a row whose id or lease
// cannot be read is an error.
func ScanJob(t Table, scan func(dest ...any) error) (*Job, error) {
	return NewScanner(t, 1).Scan(scan)
}

// Scanner is ScanJob for the rows of one claim: it keeps its scan
// destinations from row to row and hands out Jobs from one slab, so a row
// costs the user's value and little else (with the lease form's settlers
// from a slab too and its lease kept as a time: 23 -> 16 allocations a job,
// BenchmarkClaimHandleAck on Postgres). A Job of the slab keeps the whole
// slab alive: the subscription drops each Job's Value once its handler
// returns, so the slab holds no user's row past its handling.
type Scanner struct {
	t     Table
	dest  []any
	lease any
	att   sql.NullInt64
	jobs  []Job
}

// NewScanner returns a Scanner for about rows rows.
func NewScanner(t Table, rows int) *Scanner {
	return &Scanner{t: t, jobs: make([]Job, 0, max(rows, 1))}
}

// Scan reads the next row, as ScanJob does.
func (s *Scanner) Scan(scan func(dest ...any) error) (*Job, error) {
	if len(s.jobs) == cap(s.jobs) {
		s.jobs = make([]Job, 0, cap(s.jobs)) // a new slab; handed-out Jobs stay
	}
	s.jobs = s.jobs[:len(s.jobs)+1]
	j := &s.jobs[len(s.jobs)-1]
	s.lease, s.att = nil, sql.NullInt64{}
	value, dest := s.t.New(append(s.dest[:0], &j.ID, &s.lease, &s.att))
	s.dest = dest
	if err := scan(dest...); err != nil {
		// Scan again (database/sql allows it on the same row) with the
		// user's fields discarded, to learn which row it is.
		for i := 3; i < len(dest); i++ {
			dest[i] = new(any)
		}
		if err2 := scan(dest...); err2 != nil {
			return nil, fmt.Errorf("scan a row of %q: %w", s.t.Unquoted, err)
		}
		j.Err = fmt.Errorf("table %q row %d cannot be read into %T: %w", s.t.Unquoted, j.ID, value, err)
	}
	at, _, err := s.t.Times.Decode(s.lease)
	if err != nil {
		return nil, fmt.Errorf("table %q row %d: locked_until: %w", s.t.Unquoted, j.ID, err)
	}
	j.Lease, j.Attempts, j.Value = at, int(s.att.Int64), value
	clear(s.dest) // hold no user value past its row
	return j, nil
}

// PostgresOnly is the Supports of a form that needs Postgres: holds says how
// the form holds a row, for the error.
func PostgresOnly(form, holds string, d *dialect.Dialect) error {
	if d.Kind != dialect.Postgres {
		return fmt.Errorf("the %s form holds %s, which needs Postgres; %s cannot serve it: use lease.Form, which runs on every database", form, holds, d)
	}
	return nil
}

// CheckEnv refuses an Env a form that holds connections cannot run in.
func CheckEnv(f Form, env Env) error {
	if err := f.Supports(env.Dialect); err != nil {
		return fmt.Errorf("table %q: %w", env.Table.Unquoted, err)
	}
	if env.Conns < 1 {
		return fmt.Errorf("%s form on %q: it needs at least one connection for jobs in work, got %d", f.Name(), env.Table.Unquoted, env.Conns)
	}
	return nil
}
