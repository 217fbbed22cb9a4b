package inbox

import (
	"cmp"
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
// that the column exists. With a Rate too (of the same column or another),
// a row is claimed only when both allow: a slot of the limit, freed when
// the row is settled, and one of the rate, which lasts its window. Bound: a
// column name, n at least 1; not with FairBy (Subscribe refuses the two
// together).
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
// values without one (a Rate is Subscription.Rate's).
func (s *Subscription) Limit() (column string, n int) {
	if l := s.cfg.limit; l != nil {
		return l.column, l.max
	}
	return "", 0
}

type slotKey struct{}

// SlotFrom returns the limit slot held by the handling whose context is
// ctx, false when its subscription has no limit or its row's key is NULL.
// A subscription with a Limit and a Rate returns the Limit's slot (the
// Rate's where the row's key of the limit is NULL); SlotsFrom returns both.
func SlotFrom(ctx context.Context) (LimitSlot, bool) {
	s, ok := ctx.Value(slotKey{}).([]LimitSlot)
	if !ok || len(s) == 0 {
		return LimitSlot{}, false
	}
	return s[0], true
}

// SlotsFrom returns every slot the handling whose context is ctx holds:
// its Limit's, then its Rate's (a rate's Fence is its take's time in
// microseconds on the claimer's clock); nil without.
func SlotsFrom(ctx context.Context) []LimitSlot {
	s, _ := ctx.Value(slotKey{}).([]LimitSlot)
	return slices.Clone(s)
}

// checkFlow refuses the flow options a subscription cannot serve together.
func (c *subConfig) checkFlow() error {
	for _, l := range []*limitConfig{c.limit, c.rate} {
		if c.fairBy != "" && l != nil {
			// The probe for the next value would meet values whose slots
			// are all held and take their turn claiming nothing.
			return fmt.Errorf("%w: FairBy(%q) with a %s on %q: FairBy's probe for the next value does not pass over the values whose slots are all held, so those would take turns that claim nothing; use one of them", ErrInvalid, c.fairBy, l.kind(), l.column)
		}
	}
	if c.limit != nil && c.rate != nil && c.limit.name != "" && c.limit.name == c.rate.name {
		return fmt.Errorf("%w: SharedLimit and SharedRate both named %q: a limit's slots and a rate's are told apart by their name; give each its own", ErrInvalid, c.limit.name)
	}
	return nil
}

// limiters are the subscription's limiters, the limit's before the
// rate's; nil without.
func (s *Subscription) limiters() []*slots.Limiter {
	var out []*slots.Limiter
	for _, l := range []*slots.Limiter{s.limiter, s.rater} {
		if l != nil {
			out = append(out, l)
		}
	}
	return out
}

// checkLimits checks the columns of the subscription's limit and rate, and
// the slot table, and sets them into t.
func (s *Subscription) checkLimits(ctx context.Context, t *dialect.Table) error {
	if s.cfg.limit == nil && s.cfg.rate == nil {
		return nil
	}
	d := s.b.d
	cols, err := d.Columns(ctx, s.b.db, s.table)
	for _, l := range []*limitConfig{s.cfg.limit, s.cfg.rate} {
		if l == nil {
			continue
		}
		if err != nil {
			return fmt.Errorf("inbox: subscription %q: %s on column %q: %w", s.cfg.name, l.kind(), l.column, err)
		}
		if !slices.ContainsFunc(cols, func(c dialect.Column) bool { return c.Name == l.column }) {
			return tableError(s.table, []TableProblem{{Column: l.column,
				Problem: fmt.Sprintf("does not exist, and subscription %q limits rows per value of it (inbox.%s)", s.cfg.name, l.kind()),
				Fix:     fmt.Sprintf("ALTER TABLE %s ADD COLUMN %s TEXT (or limit a column the table has)", d.Quote(s.table), d.Quote(l.column))}})
		}
		name := s.limitName(l)
		if l.name == "" {
			if err := dialect.ValidLimitName(name); err != nil {
				return fmt.Errorf("inbox: subscription %q: %w: %s(%q, %d): %v; name it with Shared%s", s.cfg.name, ErrInvalid, l.kind(), l.column, l.max, err, l.kind())
			}
		}
		if dl := (dialect.Limit{Name: name, Key: d.Quote(l.column), Max: l.max, Per: l.per}); l.per > 0 {
			t.Rate = dl
		} else {
			t.Limit = dl
		}
	}
	q := d.Slots("").Probe()
	var n int
	if err := s.b.db.QueryRowContext(ctx, q.SQL, q.Args...).Scan(&n); err != nil {
		l := cmp.Or(s.cfg.limit, s.cfg.rate)
		return fmt.Errorf("inbox: subscription %q: %s on column %q: the slot table %s cannot be read (create it with migrations.ApplyLimits(ctx, db)): %w", s.cfg.name, l.kind(), l.column, dialect.LimitTable, err)
	}
	return nil
}

// limitName is the name of limit l of the subscription: SharedLimit's (or
// SharedRate's), or "table:column" ("table:column:rate" for a Rate).
func (s *Subscription) limitName(l *limitConfig) string {
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
	for _, l := range []*limitConfig{s.cfg.limit, s.cfg.rate} {
		if l == nil {
			continue
		}
		kind := LimitKindInWork
		if l.per > 0 {
			kind = LimitKindRate
		}
		out = append(out, LimitSpec{Kind: kind, Name: s.limitName(l), Column: l.column, N: l.max, Per: l.per})
	}
	return out
}

// newLimiters makes the subscription's limiters once its form is made.
func (s *Subscription) newLimiters(t dialect.Table, c contract.Claimer) {
	channel := ""
	if s.b.listener != nil {
		channel = s.table
	}
	limiter := func(lim dialect.Limit) *slots.Limiter {
		if !lim.On() {
			return nil
		}
		return slots.New(slots.Config{DB: s.b.db, SQL: s.b.d.Slots(channel), Writer: s.b.writer, Clock: s.b.clock,
			Limit: lim, Table: s.table, HoldExpires: c.Traits().HoldExpires, TTL: s.cfg.lease, Sweep: s.b.poll,
			Freed: func() { s.b.hub.Wake(s.table, "") }, Log: s.b.log.With("subscription", s.cfg.name), Conflict: s.b.d.Conflict})
	}
	s.limiter, s.rater = limiter(t.Limit), limiter(t.Rate)
}

// claimRows bounds a claim's rows (engine.Config.ClaimRows) by the limit's
// n: spare rows hold slots, so a claim of more rows than n could take rows
// of one key value beyond its slots and give them back. A subscription with
// a rate takes none (Ordered): a spare row's slot would count its window
// from the take, not from its start.
func (s *Subscription) claimRows() int {
	if l := s.cfg.limit; l != nil {
		return l.max
	}
	return 0
}

// limitClaims is the claim middleware of limiter l: it sweeps expired
// slots, and gives the rows the form claimed their slots (see
// slots.Limiter.Take).
func (s *Subscription) limitClaims(l *slots.Limiter) engine.ClaimMiddleware {
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
		if sl := slots.Of(j); sl != nil {
			held := make([]LimitSlot, len(sl))
			for i, h := range sl {
				held[i] = LimitSlot(h)
			}
			ctx = context.WithValue(ctx, slotKey{}, held)
		}
		return handle(ctx, j)
	}
}
