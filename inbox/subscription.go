package inbox

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlinbox/sqlinbox/claim"
	"github.com/sqlinbox/sqlinbox/claim/lease"
	iclaim "github.com/sqlinbox/sqlinbox/internal/claim"
	"github.com/sqlinbox/sqlinbox/internal/claim/deps"
	"github.com/sqlinbox/sqlinbox/internal/claim/slots"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/internal/engine"
	"github.com/sqlinbox/sqlinbox/internal/inboxtype"
	"github.com/sqlinbox/sqlinbox/notify"
)

// Defaults of a subscription's options.
const (
	DefaultWorkers         = 1
	DefaultLease           = 30 * time.Second
	DefaultMaxAttempts     = 25
	DefaultShutdownTimeout = 30 * time.Second
	DefaultTimeout         = time.Minute
	// MaxBackoff caps the default backoff between attempts.
	MaxBackoff = engine.MaxBackoff
)

// SubOption configures a subscription. A value out of its bound makes
// Subscribe fail with an error wrapping ErrInvalid.
type SubOption func(*subConfig) error

type subConfig struct {
	workers     int
	lease       time.Duration
	maxAttempts int
	backoff     func(attempt int) time.Duration
	form        claim.Form
	shutdown    time.Duration
	timeout     time.Duration
	name        string
	observe     func(Event)
	fairBy      string        // FairBy's column; "" for claims in claim order
	limit       *limitConfig  // Limit's; nil without
	rate        *limitConfig  // Rate's; nil without
	history     time.Duration // History's retention; zero for none
}

// Timeout sets how long one handling may run. At the deadline its context
// ends with ErrTimeout and its lease is no longer extended: a handler that
// returns is retried (or parked after its last attempt); one that ignores
// its context loses its lease when the lease runs out, and another claimer
// takes the row. Default: DefaultTimeout (1m). Bound: positive.
func Timeout(d time.Duration) SubOption {
	return func(c *subConfig) error {
		if d <= 0 {
			return fmt.Errorf("inbox: %w: Timeout(%v); give a positive duration, or leave the option out for the default %v", ErrInvalid, d, DefaultTimeout)
		}
		c.timeout = d
		return nil
	}
}

// Observe calls f after each row is settled: for metrics, and for tests
// that wait on handlings instead of on time. It is called from the worker
// that handled the row, or, for a lease ack, from the goroutine that sent
// the ack's statement, or, for a row given back at a stop, from Run; a
// spare row (claimed beyond the free workers) given back at a pause or
// near its lease's end, or found lost before it started, is reported from
// the worker about to take it or from Run. f must be quick and safe for concurrent use: a slow f holds up the acks that
// follow. It must not wait on the subscription itself (WaitIdle, say): the
// subscription is not idle until f has returned. Default: none. Bound: nil
// is none.
func Observe(f func(Event)) SubOption {
	return func(c *subConfig) error { c.observe = f; return nil }
}

// Workers sets how many handlers run at once in this subscription on this
// instance. A worker takes its next row once its handler returns; the
// row's ack, retry or park goes on beside it (at most n retries, parks and
// snoozes of the subscription in flight at once, and, in the lease form,
// whose acks wait on no worker, n + min(2000, 20n) acks), and Observe sees
// the outcome once it is settled. A row handled and not yet acked when its
// process dies is handled again once its lease runs out. Default:
// DefaultWorkers (1). Bound: at least 1.
func Workers(n int) SubOption {
	return func(c *subConfig) error {
		if n < 1 {
			return fmt.Errorf("inbox: %w: Workers(%d); give at least 1", ErrInvalid, n)
		}
		c.workers = n
		return nil
	}
}

// Lease sets how long a claim holds a row in the lease form before another
// claimer may take it. A handler still running at two thirds of it gets it
// extended. Default: DefaultLease (30s). Bound: at least 1s.
func Lease(d time.Duration) SubOption {
	return func(c *subConfig) error {
		if d < time.Second {
			return fmt.Errorf("inbox: %w: Lease(%v); give at least 1s, or leave the option out for the default %v", ErrInvalid, d, DefaultLease)
		}
		c.lease = d
		return nil
	}
}

// MaxAttempts sets how many attempts a row gets: a row whose n-th attempt
// fails is parked. Attempts are counted when a row is claimed, in its
// attempts column, so a handling whose process dies (or whose handler never
// returns) counts too: a row claimed more than n times is parked without
// running its handler again. It needs an attempts column; without one rows
// are retried with capped backoff for ever. Default: DefaultMaxAttempts
// (25). Bound: at least 1.
func MaxAttempts(n int) SubOption {
	return func(c *subConfig) error {
		if n < 1 {
			return fmt.Errorf("inbox: %w: MaxAttempts(%d); give at least 1, or leave the option out for the default %d", ErrInvalid, n, DefaultMaxAttempts)
		}
		c.maxAttempts = n
		return nil
	}
}

// Backoff sets the delay before attempt n+1 after n failures (n >= 1).
// Default: DefaultBackoff (one second doubled per failure, capped at
// MaxBackoff) less a jitter of up to a quarter, drawn from the row's id and
// the attempt, so rows that failed together do not all come back together.
// Bound: not nil.
func Backoff(f func(failures int) time.Duration) SubOption {
	return func(c *subConfig) error {
		if f == nil {
			return fmt.Errorf("inbox: %w: Backoff(nil); give a function, or leave the option out for DefaultBackoff", ErrInvalid)
		}
		c.backoff = f
		return nil
	}
}

// Form picks the claim form: lease.Form (SQLite and Postgres), rowlock.Form
// or advisory.Form (Postgres). Default: lease.Form. Bound: not nil, and a
// form that serves the broker's database (Subscribe checks).
func Form(f claim.Form) SubOption {
	return func(c *subConfig) error {
		if f == nil {
			return fmt.Errorf("inbox: %w: Form(nil); give lease.Form, rowlock.Form or advisory.Form, or leave the option out for lease.Form", ErrInvalid)
		}
		c.form = f
		return nil
	}
}

// ShutdownTimeout sets how long running handlers may finish after the
// subscription is told to stop; then their contexts are cancelled.
// Default: DefaultShutdownTimeout (30s). Bound: positive.
func ShutdownTimeout(d time.Duration) SubOption {
	return func(c *subConfig) error {
		if d <= 0 {
			return fmt.Errorf("inbox: %w: ShutdownTimeout(%v); give a positive duration, or leave the option out for the default %v", ErrInvalid, d, DefaultShutdownTimeout)
		}
		c.shutdown = d
		return nil
	}
}

// Name names the subscription in logs. Default: the table, and group.
// Bound: "" is the default.
func Name(name string) SubOption {
	return func(c *subConfig) error { c.name = name; return nil }
}

// Subscription claims rows of one queue and runs a handler on each. Its
// engine (internal/engine) does the work; the subscription keeps what
// outlives a Run: its counters and idle state.
type Subscription struct {
	b       *Broker
	cfg     subConfig
	table   string
	group   string
	grouped bool
	shape   *shape
	handle  func(ctx context.Context, value any) error
	// handleJob, when set, handles the claimed job itself (HandleTx).
	handleJob func(ctx context.Context, j *iclaim.Job) error

	claimer iclaim.Claimer
	// limiter keeps the subscription's Limit, rater its Rate; nil
	// without.
	limiter, rater *slots.Limiter
	history        *iclaim.History // where acks move rows (History); nil: they delete
	// releaser releases the children of acked rows where the table has
	// edges (After); nil without.
	releaser *deps.Releaser
	depsSQL  *dialect.DepsSQL
	// adopt, where set, is how a step its HandleTx publishes After the
	// handled row is written leased to it (see adoptable).
	adopt *adoptable
	// deco is what its service adds around its claims and handlings (set
	// by the service's Run; empty otherwise).
	deco    decoration
	poller  *engine.Poller // group subscriptions': the table's idle poller
	running atomic.Bool
	// eng is the engine while Run runs: cancels reach its handlers.
	eng   atomic.Pointer[engine.Engine]
	stats engine.Counters
	idle  *engine.Idle
}

// WaitIdle blocks until the subscription is idle: running, with no claim in
// flight and no handler running, waiting for a wake or its poll. Tests on a
// fake clock call it before they advance the clock, so the poll they mean
// to fire is armed.
func (s *Subscription) WaitIdle(ctx context.Context) error { return s.idle.Wait(ctx) }

// Stats counts what a subscription has done since it started:
//
//	type Stats struct {
//		Claims   int64 // claim statements sent
//		Claimed  int64 // rows claimed
//		Acked    int64
//		Retried  int64
//		Parked   int64
//		Snoozed  int64
//		Lost     int64 // rows whose lease or hold was lost while in work
//		Released int64 // rows given back unstarted (at shutdown; a claim's spare rows also at a pause, or when one waited two thirds of its lease)
//		Failed   int64 // settlements that failed (the row comes back after its lease)
//		Canceled int64 // rows canceled by an operator while in work, parked or deleted
//		// LimitRefused counts rows a claim took whose key value had no slot
//		// of its Limit or Rate left when they asked (claimers racing for the last
//		// slot): given back unstarted, their attempt returned. Rows of a
//		// value whose slots were taken before the claim are not taken at all.
//		LimitRefused int64
//		// PickupFallback says why rows other processes write wait for the poll
//		// although notifications were asked for (Broker.Pickup); "" when not.
//		PickupFallback string
//	}
type Stats = inboxtype.Stats

// Stats returns the subscription's counters, and its broker's pickup
// fallback.
func (s *Subscription) Stats() Stats {
	st := s.stats.Read()
	for _, l := range s.limiters() {
		st.LimitRefused += l.Refused()
	}
	st.PickupFallback = s.b.pickup.Fallback
	return st
}

// Subscribe makes a subscription of handler h to queue q. It checks what it
// can without the database (the options, and that the form serves the
// broker's database; the advisory form, behind a pooler in transaction
// mode, is refused with ErrTransactionPooling); Run checks the table before
// its first claim.
func Subscribe[T any](b *Broker, q Queue[T], h Handler[T], opts ...SubOption) (*Subscription, error) {
	if q.shape == nil {
		return nil, fmt.Errorf("inbox: %w: Subscribe to a zero Queue: make it with NewQueue", ErrInvalid)
	}
	if h == nil {
		return nil, fmt.Errorf("inbox: %w: Subscribe to %q with a nil handler", ErrInvalid, q.table)
	}
	cfg := subConfig{workers: DefaultWorkers, lease: DefaultLease, maxAttempts: DefaultMaxAttempts,
		form: lease.Form, shutdown: DefaultShutdownTimeout, timeout: DefaultTimeout}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if cfg.name == "" {
		cfg.name = q.table
		if q.group != "" {
			cfg.name += "/" + q.group
		}
	}
	if err := cfg.form.Supports(b.d); err != nil {
		return nil, fmt.Errorf("inbox: subscription %q on table %q: %w: the %s form cannot run on %s: %w", cfg.name, q.table, ErrInvalid, cfg.form.Name(), b.d, err)
	}
	if err := b.refuseSessionForm(context.Background(), cfg.form, cfg.name, q.table); err != nil {
		return nil, err
	}
	if q.group != "" && q.shape.column(RoleGroup) == "" {
		return nil, fmt.Errorf("inbox: subscription %q: %w: queue has group %q but %v tags no group column (`inbox:\"group\"`)", cfg.name, ErrInvalid, q.group, q.shape.typ)
	}
	if err := cfg.checkFlow(); err != nil {
		return nil, fmt.Errorf("inbox: subscription %q: %w", cfg.name, err)
	}
	if cfg.fairBy != "" && q.group != "" {
		return nil, fmt.Errorf("inbox: subscription %q: %w: FairBy(%q) on a queue of group %q: its rows share one group already; subscribe to the whole table (no Group) to share claims between its values", cfg.name, ErrInvalid, cfg.fairBy, q.group)
	}
	if b.maxConn == 1 {
		return nil, fmt.Errorf("inbox: subscription %q: %w: the pool holds one connection; claims need one and settlements another: give it at least 2 (%s form on %s)", cfg.name, ErrInvalid, cfg.form.Name(), b.d)
	}
	s := &Subscription{b: b, cfg: cfg, table: q.table, group: q.group, grouped: q.group != "", shape: q.shape, idle: engine.NewIdle(b.clock)}
	s.handle = func(ctx context.Context, value any) error {
		return h(ctx, *value.(*T))
	}
	return s, nil
}

// check reads the table and makes the claimer. Run calls it first.
func (s *Subscription) check(ctx context.Context) error {
	if err := s.b.refuseSessionForm(ctx, s.cfg.form, s.cfg.name, s.table); err != nil {
		return err
	}
	t, err := s.b.checkShared(ctx, s.table, s.shape, s.grouped)
	if err != nil {
		return err
	}
	if err := s.checkLimits(ctx, &t.Table); err != nil {
		return err
	}
	env := iclaim.Env{DB: s.b.db, Stmts: s.b.stmts, Writer: s.b.writer, Dialect: s.b.d, Table: t, SQL: s.b.inboxSQL(t), Clock: s.b.clock,
		Lease: s.cfg.lease, Rescan: s.b.poll, Conns: s.b.claimConns(), Budget: s.b.budget, Transactional: s.handleJob != nil}
	if s.cfg.history > 0 {
		if env.History, err = checkHistory(ctx, s.b, s.table, s.shape, t); err != nil {
			return err
		}
	}
	if err := s.checkDeps(ctx, t); err != nil {
		return err
	}
	if s.grouped {
		env.Group = s.group
		s.poller = s.b.poller(t)
	}
	if s.cfg.fairBy != "" {
		c, err := s.fairClaimer(ctx, env)
		if err != nil {
			return err
		}
		s.claimer = c
		return nil
	}
	c, err := s.cfg.form.New(env)
	if err != nil {
		return fmt.Errorf("inbox: subscription %q: %w", s.cfg.name, err)
	}
	s.claimer, s.history = c, env.History
	s.newLimiters(t.Table, c)
	s.adopt = s.adoptable(env)
	return nil
}

// adoptable is how a step its HandleTx publishes After the handled row is
// written leased to this subscription and taken by its next free worker
// with no claim, or nil where it is not: on Postgres (where a claim waits
// for its commit's flush: the step's lease commits with the handler's
// transaction instead), in the lease form, on a table without priorities
// (the step would pass rows of a higher one) and without a limit or rate
// (their slots are taken with claims).
func (s *Subscription) adoptable(env iclaim.Env) *adoptable {
	a, ok := s.claimer.(iclaim.Adopter)
	returns := s.b.d.ClaimReturns(env.Table.Table)
	if !ok || s.handleJob == nil || s.releaser == nil || s.b.d.Kind != dialect.Postgres || returns == "" ||
		s.limiters() != nil || s.shape.column(RolePriority) != "" {
		return nil
	}
	return &adoptable{table: s.table, group: s.group, returning: returns, lease: s.cfg.lease, adopter: a}
}

// Run checks the table, then claims and handles rows until ctx is done. On
// stop it claims no more, gives back rows claimed but not started, lets
// running handlers finish within ShutdownTimeout and returns nil; it
// returns an error only when the table check fails.
func (s *Subscription) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return fmt.Errorf("inbox: subscription %q is already running", s.cfg.name)
	}
	defer s.running.Store(false)
	e, waiter, err := s.start(ctx)
	if e == nil {
		return err
	}
	defer waiter.Close()
	s.eng.Store(e)
	defer s.eng.Store(nil)
	defer s.b.startCheckpoints()()
	if s.limiters() != nil {
		defer s.beat(ctx)()
	}
	if s.history != nil {
		defer s.b.startPrune(s, s.history)()
	}
	if s.releaser != nil {
		defer s.releaser.Wait()
		defer s.b.startSweep(s)()
	}
	e.Run(ctx)
	return nil
}

// beat runs the limiters' heartbeats until the func it returns is called,
// which then waits for the slots freed so far to be written: the slots of
// rows in work outlive ctx by the shutdown timeout.
//
//go:noinline
func (s *Subscription) beat(ctx context.Context) func() {
	beat, stop := context.WithCancel(context.WithoutCancel(ctx))
	var beating sync.WaitGroup
	ls := s.limiters()
	for _, l := range ls {
		beating.Go(func() { l.Heartbeat(beat) })
	}
	return func() {
		stop()
		beating.Wait()
		for _, l := range ls {
			l.Stop()
			l.Wait()
		}
	}
}

// start checks the table (once), subscribes to wakes and makes the
// engine; a nil engine means Run returns err. It is Run's but for the
// engine's run, so that Run's own frame stays small: Run's goroutine is
// what an idle subscription costs, and its stack shrinks to 4 kB only when
// under a quarter of it is in use.
//
//go:noinline
func (s *Subscription) start(ctx context.Context) (*engine.Engine, *notify.Waiter, error) {
	if s.claimer == nil {
		if err := untilReachable(ctx, s.b, "checking table "+s.table, func() error { return s.check(ctx) }); err != nil {
			if ctx.Err() != nil {
				return nil, nil, nil // stopped before the database came back
			}
			return nil, nil, err
		}
	}
	waiter := s.b.hub.Subscribe(s.table, s.group)
	if f, ok := s.claimer.(*iclaim.Fair); ok {
		f.SetWake(waiter.Wake)
	}
	s.listen(ctx)
	return engine.New(s.engineConfig(waiter.C())), waiter, nil
}

// listen waits until notifications of the table reach this process, so no
// row written between the first claim and the LISTEN waits for a poll. A
// listener that cannot connect does not hold the subscription up: the poll
// is the floor.
func (s *Subscription) listen(ctx context.Context) {
	l := s.b.listener
	if l == nil {
		return
	}
	l.Listen(s.table)
	t := time.NewTimer(listenWait)
	defer t.Stop()
	select {
	case <-l.Listening(s.table):
	case <-t.C:
		s.b.log.With("subscription", s.cfg.name).Warn("inbox: not listening for notifications yet; claiming on the poll meanwhile", "table", s.table, "waited", listenWait)
	case <-ctx.Done():
	}
}

// listenWait bounds how long a subscription waits for its notifications
// before its first claim.
const listenWait = 5 * time.Second

// engineConfig is what the engine needs of the subscription.
func (s *Subscription) engineConfig(wakes <-chan struct{}) engine.Config {
	c := engine.Config{Name: s.cfg.name, Table: s.table, Workers: s.cfg.workers, MaxAttempts: s.cfg.maxAttempts,
		Counts: s.shape.column(RoleAttempts) != "", Backoff: s.cfg.backoff,
		Lease: s.cfg.lease, Timeout: s.cfg.timeout, Shutdown: s.cfg.shutdown, Poll: s.b.poll,
		Ordered: s.shape.column(RolePriority) != "" || s.rater != nil, ClaimRows: s.claimRows(), Conns: s.b.claimConns(), Clock: s.b.clock, Log: s.b.log,
		Claimer: s.claimer, Wakes: wakes, Counters: &s.stats, Idle: s.idle, Poller: s.poller, Group: s.group}
	c.Handle = func(ctx context.Context, j *iclaim.Job) error { return s.handle(ctx, j.Value) }
	if s.handleJob != nil {
		c.Handle = s.handleJob
	}
	c.Handle = s.started(c.Handle)
	if s.limiters() != nil {
		c.Handle = withSlot(c.Handle)
	}
	if s.releaser != nil {
		c.Handle = s.withParents(c.Handle)
	}
	c.Prepare = func(j *iclaim.Job) { s.shape.setLease(reflect.ValueOf(j.Value).Elem(), j.Lease) }
	c.ErrorVerdict = errorVerdict
	c.ClaimMiddleware = s.deco.claims
	if ls := s.limiters(); ls != nil {
		// Innermost: what the hooks report claimed is what starts. The rate
		// outside the limit: a row takes its limit's slot first, which a
		// rate's refusal frees as it gives the row back, where a rate's
		// slot once taken lasts its window.
		c.ClaimMiddleware = slices.Clone(c.ClaimMiddleware)
		for _, l := range slices.Backward(ls) {
			c.ClaimMiddleware = append(c.ClaimMiddleware, s.limitClaims(l))
		}
	}
	if s.releaser != nil {
		// Innermost, on the form's own settlers: a limit's slot wraps it.
		c.ClaimMiddleware = append(slices.Clone(c.ClaimMiddleware), s.depsClaims())
	}
	c.Paused = s.deco.paused
	c.Unreachable, c.DeadConn = s.b.d.Unreachable, s.b.d.DeadConn
	c.Observe = s.observer()
	return c
}
