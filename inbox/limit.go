package inbox

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/claim/contract"
	"github.com/sqlinbox/sqlinbox/internal/claim/slots"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/internal/engine"
)

// limitConfig is a subscription's limit per key value.
type limitConfig struct {
	name   string // "" until Subscribe names it after the table
	column string
	max    int
	per    time.Duration // a rate's window (Rate); 0 for a limit
}

// kind names the option that set l, for messages.
func (l *limitConfig) kind() string {
	if l.per > 0 {
		return "Rate"
	}
	return "Limit"
}

// Limit caps the rows with the same value in column that are in work at
// once, across every instance and in every claim form, at n: a claim
// passes over the rows of a value whose n slots are all taken, so they stay
// available, use no attempt and are not retried; when a handling of the
// value ends, its slot frees and the next row of that value is claimable
// at once (subscriptions of the table in this process are woken, and on
// Postgres with notifications on, every instance). Rows whose column is
// NULL are not limited.
//
// Each row in work holds a slot, a row of the table sqlinbox_limit_slots
// (create it with migrations.ApplyLimits), whose primary key caps the slots
// of a value at n. A slot lasts as long as its row's hold: in the lease
// form, the lease (extended with it); in the row-lock and advisory forms,
// a lease of its own as long as Lease, extended every third of it while
// the process lives. So a holder that dies keeps its slot until its hold
// would have ended, never less; the next claim after that frees it (at
// most a poll later). A handler reads its slot, and its fence, with
// SlotFrom.
//
// The limit is named after the table and column ("table:column"): every
// subscription of the table that limits that column shares it, whatever
// its group. SharedLimit names one that several tables share. Run checks
// that the column exists. Bound: a column name, n at least 1; not with
// FairBy (Subscribe refuses the two together).
func Limit(column string, n int) SubOption {
	return SharedLimit("", column, n)
}

// SharedLimit is Limit under a name of its own: subscriptions (of any
// tables) that give the same name, column values alike and the same n share
// its slots, so at most n rows of one value are in work among all of them.
// Bound: name of 1 to 200 letters, digits and _ . : / - ("" names it after
// the table and column, as Limit does).
func SharedLimit(name, column string, n int) SubOption {
	return func(c *subConfig) error {
		if column == "" {
			return fmt.Errorf("inbox: %w: Limit(%q, %d): name the key column", ErrInvalid, column, n)
		}
		if n < 1 {
			return fmt.Errorf("inbox: %w: Limit(%q, %d): give at least 1 row in work per value", ErrInvalid, column, n)
		}
		if name != "" {
			if err := dialect.ValidLimitName(name); err != nil {
				return fmt.Errorf("inbox: %w: SharedLimit(%q, %q, %d): %v", ErrInvalid, name, column, n, err)
			}
		}
		if c.limit != nil && c.limit.per > 0 {
			return fmt.Errorf("inbox: %w: Limit(%q, %d) with Rate(%q, ...) on one subscription: a limit and a rate are not served together yet; use one of them", ErrInvalid, column, n, c.limit.column)
		}
		c.limit = &limitConfig{name: name, column: column, max: n}
		return nil
	}
}

// LimitSlot is the slot of a limit that a handling holds (see Limit).
type LimitSlot struct {
	Limit string // the limit's name
	Key   string // the row's key value, as text
	Slot  int    // below the limit's n
	// Fence is the slot's fencing number: a later holder of the same slot
	// has a greater one while the hosts' clocks agree within a lease (the
	// lease form's own assumption). A downstream system that keeps the
	// greatest fence it saw per key and slot refuses a holder that ran on
	// past the end of its hold.
	Fence int64
}

// Limit returns the subscription's limit per key: its column and n, zero
// values without one (and with a Rate: see Subscription.Rate).
func (s *Subscription) Limit() (column string, n int) {
	if l := s.cfg.limit; l != nil && l.per == 0 {
		return l.column, l.max
	}
	return "", 0
}

type slotKey struct{}

// SlotFrom returns the limit slot held by the handling whose context is
// ctx, false when its subscription has no limit or its row's key is NULL.
func SlotFrom(ctx context.Context) (LimitSlot, bool) {
	s, ok := ctx.Value(slotKey{}).(LimitSlot)
	return s, ok
}

// checkLimit checks the limit's column and the slot table, and sets the
// limit into t.
func (s *Subscription) checkLimit(ctx context.Context, t *dialect.Table) error {
	l := s.cfg.limit
	d := s.b.d
	cols, err := d.Columns(ctx, s.b.db, s.table)
	if err != nil {
		return fmt.Errorf("inbox: subscription %q: %s on column %q: %w", s.cfg.name, l.kind(), l.column, err)
	}
	if !slices.ContainsFunc(cols, func(c dialect.Column) bool { return c.Name == l.column }) {
		return tableError(s.table, []TableProblem{{Column: l.column,
			Problem: fmt.Sprintf("does not exist, and subscription %q limits rows per value of it (inbox.%s)", s.cfg.name, l.kind()),
			Fix:     fmt.Sprintf("ALTER TABLE %s ADD COLUMN %s TEXT (or limit a column the table has)", d.Quote(s.table), d.Quote(l.column))}})
	}
	q := d.Slots("").Probe()
	var n int
	if err := s.b.db.QueryRowContext(ctx, q.SQL, q.Args...).Scan(&n); err != nil {
		return fmt.Errorf("inbox: subscription %q: %s on column %q: the slot table %s cannot be read (create it with migrations.ApplyLimits(ctx, db)): %w", s.cfg.name, l.kind(), l.column, dialect.LimitTable, err)
	}
	name := s.limitName()
	if l.name == "" {
		if err := dialect.ValidLimitName(name); err != nil {
			return fmt.Errorf("inbox: subscription %q: %w: %s(%q, %d): %v; name it with Shared%s", s.cfg.name, ErrInvalid, l.kind(), l.column, l.max, err, l.kind())
		}
	}
	t.Limit = dialect.Limit{Name: name, Key: d.Quote(l.column), Max: l.max, Per: l.per}
	return nil
}

// limitName is the name of the subscription's limit: SharedLimit's (or
// SharedRate's), or "table:column" ("table:column:rate" for a Rate).
func (s *Subscription) limitName() string {
	l := s.cfg.limit
	switch {
	case l.name != "":
		return l.name
	case l.per > 0:
		return s.table + ":" + l.column + ":rate"
	}
	return s.table + ":" + l.column
}

// LimitSpec is a subscription's limit per key as the registry records it
// (RegisteredSubscription.Limits), so that operators read each limit's n
// and key column without the subscription's code (Operator.Limits).
type LimitSpec struct {
	// Kind says what N counts: LimitKindInWork, rows of one key value in
	// work at once (Limit, SharedLimit); LimitKindRate, handlings of one
	// key value started per Per (Rate, SharedRate).
	Kind   string `json:"kind"`
	Name   string `json:"name"`   // the limit's name: "table:column", or SharedLimit's
	Column string `json:"column"` // the key column
	N      int    `json:"n"`
	// Per is a rate's window; 0 for a limit.
	Per time.Duration `json:"per,omitempty"`
}

// LimitKindInWork is the Kind of a LimitSpec of Limit and SharedLimit.
const LimitKindInWork = "limit"

// LimitKindRate is the Kind of a LimitSpec of Rate and SharedRate.
const LimitKindRate = "rate"

// limitSpecs are the subscription's limits per key, nil without.
func (s *Subscription) limitSpecs() []LimitSpec {
	var out []LimitSpec
	if l := s.cfg.limit; l != nil {
		kind := LimitKindInWork
		if l.per > 0 {
			kind = LimitKindRate
		}
		out = append(out, LimitSpec{Kind: kind, Name: s.limitName(), Column: l.column, N: l.max, Per: l.per})
	}
	return out
}

// newLimiter makes the subscription's limiter once its form is made.
func (s *Subscription) newLimiter(t dialect.Table, c contract.Claimer) {
	channel := ""
	if s.b.listener != nil {
		channel = s.table
	}
	s.limiter = slots.New(slots.Config{DB: s.b.db, SQL: s.b.d.Slots(channel), Writer: s.b.writer, Clock: s.b.clock,
		Limit: t.Limit, Table: s.table, HoldExpires: c.Traits().HoldExpires, TTL: s.cfg.lease, Sweep: s.b.poll,
		Freed: func() { s.b.hub.Wake(s.table, "") }, Log: s.b.log.With("subscription", s.cfg.name), Conflict: s.b.d.Conflict})
}

// limitClaims is the claim middleware of a limited subscription: it sweeps
// expired slots, and gives the rows the form claimed their slots (see
// slots.Limiter.Take).
func (s *Subscription) limitClaims() engine.ClaimMiddleware {
	l := s.limiter
	return func(ctx context.Context, max int, next engine.ClaimFunc) ([]*contract.Job, error) {
		l.BeforeClaim(ctx)
		jobs, err := next(ctx, max)
		out := jobs
		if len(jobs) > 0 {
			var terr error
			out, terr = l.Take(ctx, jobs)
			if err == nil && terr != nil {
				err = fmt.Errorf("inbox: subscription %q: %w", s.cfg.name, terr)
			}
		}
		if err == nil {
			l.AfterClaim(ctx, len(out), len(jobs)-len(out), max)
		}
		return out, err
	}
}

// withSlot gives the handler's context the slot its job holds.
func withSlot(handle func(context.Context, *contract.Job) error) func(context.Context, *contract.Job) error {
	return func(ctx context.Context, j *contract.Job) error {
		if sl, ok := slots.Of(j); ok {
			ctx = context.WithValue(ctx, slotKey{}, LimitSlot(sl))
		}
		return handle(ctx, j)
	}
}
