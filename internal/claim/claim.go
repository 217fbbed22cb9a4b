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
	"fmt"
	"time"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/internal/claim/contract"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// The contract the engine drives forms by is defined in package contract,
// which needs no database driver (so neither does the engine); forms name
// it here.
type (
	Claimer    = contract.Claimer
	Traits     = contract.Traits
	Settler    = contract.Settler
	AsyncAcker = contract.AsyncAcker
	Forgetter  = contract.Forgetter
	Holder     = contract.Holder
	Job        = contract.Job
	Adopter    = contract.Adopter
)

// ErrLost is contract.ErrLost: a settlement that changed nothing.
var ErrLost = contract.ErrLost

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
	// History, when set, is where acks move rows instead of deleting them
	// (inbox.History).
	History *History
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
// costs the user's value and little else (the lease form takes its settlers
// from a slab too and keeps its lease as a time). A Job of the slab keeps the
// whole slab alive: the subscription drops each Job's Value once its handler
// returns, so the slab holds no user's row past its handling.
type Scanner struct {
	t     Table
	dest  []any
	lease any
	att   sql.NullInt64
	key   sql.NullString
	rate  sql.NullString // the rate's key
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
	s.key, s.rate = sql.NullString{}, sql.NullString{}
	if s.t.Limit.On() {
		dest = append(dest, &s.key)
	}
	if s.t.Rate.On() {
		dest = append(dest, &s.rate)
	}
	s.dest = dest
	if err := scan(dest...); err != nil {
		// Scan again (database/sql allows it on the same row) with the
		// user's fields discarded, to learn which row it is.
		for i := 3; i < len(dest); i++ {
			if dest[i] != &s.key && dest[i] != &s.rate {
				dest[i] = new(any)
			}
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
	j.Key, j.Keyed = s.key.String, s.key.Valid
	j.RateKey, j.RateKeyed = s.rate.String, s.rate.Valid
	clear(s.dest) // hold no user value past its row
	return j, nil
}

// SessionLocksOnly is the Supports of a form that holds rows under locks
// of the session (see dialect.SessionLocks): holds says how the form holds
// a row, for the error.
func SessionLocksOnly(form, holds string, d *dialect.Dialect) error {
	if !d.SessionLocks() {
		return fmt.Errorf("the %s form holds %s, which needs Postgres, MariaDB or MySQL; %s cannot serve it: use lease.Form, which runs on every database", form, holds, d)
	}
	return nil
}

// RowLocksOnly refuses a database that cannot hold a row lock in a
// transaction while other claimers skip the row (see
// dialect.RowLocks).
func RowLocksOnly(form, holds string, d *dialect.Dialect) error {
	if !d.RowLocks() {
		return fmt.Errorf("the %s form holds %s, which needs Postgres, MariaDB or MySQL; %s cannot serve it: use lease.Form, which runs on every database", form, holds, d)
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
