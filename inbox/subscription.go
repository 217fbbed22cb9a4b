package inbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlinbox/sqlinbox/claim"
	"github.com/sqlinbox/sqlinbox/claim/lease"
	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// Defaults of a subscription's options.
const (
	DefaultWorkers         = 1
	DefaultLease           = 30 * time.Second
	DefaultMaxAttempts     = 25
	DefaultShutdownTimeout = 30 * time.Second
	DefaultTimeout         = time.Minute
	// MaxBackoff caps the default backoff between attempts.
	MaxBackoff = 10 * time.Minute
)

// SubOption configures a subscription.
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
}

// Timeout sets how long one handling may run. At the deadline its context
// ends with ErrTimeout and its lease is no longer extended: a handler that
// returns is retried (or parked after its last attempt); one that ignores
// its context loses its lease when the lease runs out, and another claimer
// takes the row. Default DefaultTimeout (one minute); must be positive.
func Timeout(d time.Duration) SubOption {
	return func(c *subConfig) error {
		if d <= 0 {
			return fmt.Errorf("inbox: Timeout must be positive, got %v", d)
		}
		c.timeout = d
		return nil
	}
}

// Observe calls f after each row is settled: for metrics, and for tests
// that wait on handlings instead of on time. It is called from the worker
// that handled the row, or, for a lease ack, from the goroutine that sent
// the ack's statement, or, for a row given back at a stop, from Run. f must
// be quick and safe for concurrent use: a slow f holds up the acks that
// follow. It must not wait on the subscription itself (WaitIdle, say): the
// subscription is not idle until f has returned.
func Observe(f func(Event)) SubOption {
	return func(c *subConfig) error { c.observe = f; return nil }
}

// Workers sets how many handlers run at once in this subscription on this
// instance. Default 1; at least 1. A worker takes its next row once its
// handler returns; the row's ack, retry or park goes on beside it (at most
// n settlements of the subscription in flight at once), and Observe sees
// the outcome once it is settled.
func Workers(n int) SubOption {
	return func(c *subConfig) error {
		if n < 1 {
			return fmt.Errorf("inbox: Workers must be at least 1, got %d", n)
		}
		c.workers = n
		return nil
	}
}

// Lease sets how long a claim holds a row in the lease form before another
// claimer may take it. A handler still running at two thirds of it gets it
// extended. Default DefaultLease (30 s); at least one second.
func Lease(d time.Duration) SubOption {
	return func(c *subConfig) error {
		if d < time.Second {
			return fmt.Errorf("inbox: Lease must be at least 1s, got %v", d)
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
// are retried with capped backoff for ever. Default DefaultMaxAttempts
// (25); at least 1.
func MaxAttempts(n int) SubOption {
	return func(c *subConfig) error {
		if n < 1 {
			return fmt.Errorf("inbox: MaxAttempts must be at least 1, got %d", n)
		}
		c.maxAttempts = n
		return nil
	}
}

// Backoff sets the delay before attempt n+1 after n failures (n >= 1).
// Default: DefaultBackoff (one second doubled per failure, capped at
// MaxBackoff) less a jitter of up to a quarter, drawn from the row's id and
// the attempt, so rows that failed together do not all come back together.
func Backoff(f func(failures int) time.Duration) SubOption {
	return func(c *subConfig) error {
		if f == nil {
			return fmt.Errorf("inbox: Backoff(nil)")
		}
		c.backoff = f
		return nil
	}
}

// Form picks the claim form: lease.Form (default; SQLite and Postgres),
// rowlock.Form or advisory.Form (Postgres).
func Form(f claim.Form) SubOption {
	return func(c *subConfig) error {
		if f == nil {
			return fmt.Errorf("inbox: Form(nil)")
		}
		c.form = f
		return nil
	}
}

// ShutdownTimeout sets how long running handlers may finish after the
// subscription is told to stop; then their contexts are cancelled. Default
// DefaultShutdownTimeout (30 s).
func ShutdownTimeout(d time.Duration) SubOption {
	return func(c *subConfig) error {
		if d <= 0 {
			return fmt.Errorf("inbox: ShutdownTimeout must be positive, got %v", d)
		}
		c.shutdown = d
		return nil
	}
}

// Name names the subscription in logs. Default: the table, and group.
func Name(name string) SubOption {
	return func(c *subConfig) error { c.name = name; return nil }
}

// Subscription claims rows of one queue and runs a handler on each.
type Subscription struct {
	b       *Broker
	cfg     subConfig
	table   string
	group   string
	grouped bool
	shape   *shape
	handle  func(ctx context.Context, value any) error

	claimer   claim.Claimer
	leaseForm bool // the lease form: a handler's lease is extended and can run out
	counts    bool // the table has an attempts column

	overruns  atomic.Int64 // handlers running on after their row was lost
	overrunMu sync.Mutex
	overrun   map[int64]chan struct{} // closed when that handler returns
	running   atomic.Bool
	stats     counters

	idleMu   sync.Mutex
	isIdle   bool
	idleNow  chan struct{} // closed when the loop next becomes idle
	idlePoll time.Time     // when the armed poll fires; zero when none is armed
	idleWake <-chan struct{}
}

// setIdle records whether the loop waits on nothing but a wake, the poll or
// a stop: no claim in flight, no handler running.
func (s *Subscription) setIdle(idle bool, poll time.Time, wake <-chan struct{}) {
	s.idleMu.Lock()
	defer s.idleMu.Unlock()
	s.idlePoll, s.idleWake = poll, wake
	// Every idle report wakes WaitIdle: a wake taken while the loop stayed
	// idle (during a claim backoff) must not leave a waiter asleep.
	if idle {
		close(s.idleNow)
		s.idleNow = make(chan struct{})
	}
	s.isIdle = idle
}

// WaitIdle blocks until the subscription is idle: running, with no claim in
// flight and no handler running, waiting for a wake or its poll. Tests on a
// fake clock call it before they advance the clock, so the poll they mean
// to fire is armed.
func (s *Subscription) WaitIdle(ctx context.Context) error {
	for {
		s.idleMu.Lock()
		// A poll that fired or a wake that arrived, not yet taken by the
		// loop, will make it claim: not idle yet.
		if s.isIdle && (s.idlePoll.IsZero() || s.b.clock.Now().Before(s.idlePoll)) && len(s.idleWake) == 0 {
			s.idleMu.Unlock()
			return nil
		}
		ch := s.idleNow
		s.idleMu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

type counters struct {
	claims, claimed, acked, retried, parked, snoozed, lost, released, failed atomic.Int64
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
	Released int64 // rows given back unstarted at shutdown
	Failed   int64 // settlements that failed (the row comes back after its lease)
}

// Stats returns the subscription's counters.
func (s *Subscription) Stats() Stats {
	c := &s.stats
	return Stats{Claims: c.claims.Load(), Claimed: c.claimed.Load(), Acked: c.acked.Load(), Retried: c.retried.Load(),
		Parked: c.parked.Load(), Snoozed: c.snoozed.Load(), Lost: c.lost.Load(), Released: c.released.Load(), Failed: c.failed.Load()}
}

// Subscribe makes a subscription of handler h to queue q. It checks what it
// can without the database (the options, and that the form serves the
// broker's database); Run checks the table before its first claim.
func Subscribe[T any](b *Broker, q Queue[T], h Handler[T], opts ...SubOption) (*Subscription, error) {
	if q.shape == nil {
		return nil, fmt.Errorf("inbox: Subscribe to a zero Queue: make it with NewQueue")
	}
	if h == nil {
		return nil, fmt.Errorf("inbox: Subscribe to %q with a nil handler", q.table)
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
		return nil, fmt.Errorf("inbox: subscription %q on table %q: the %s form cannot run on %s: %w", cfg.name, q.table, cfg.form.Name(), b.d, err)
	}
	if q.group != "" && q.shape.column(RoleGroup) == "" {
		return nil, fmt.Errorf("inbox: subscription %q: queue has group %q but %v tags no group column (`inbox:\"group\"`)", cfg.name, q.group, q.shape.typ)
	}
	if b.maxConn == 1 {
		return nil, fmt.Errorf("inbox: subscription %q: the pool holds one connection; claims need one and settlements another: give it at least 2 (%s form on %s)", cfg.name, cfg.form.Name(), b.d)
	}
	s := &Subscription{b: b, cfg: cfg, table: q.table, group: q.group, grouped: q.group != "", shape: q.shape, idleNow: make(chan struct{}),
		leaseForm: cfg.form.Name() == lease.Form.Name(), counts: q.shape.column(RoleAttempts) != ""}
	s.handle = func(ctx context.Context, value any) error {
		return h(ctx, *value.(*T))
	}
	return s, nil
}

// check reads the table and makes the claimer. Run calls it first.
func (s *Subscription) check(ctx context.Context) error {
	t, err := checkTable(ctx, s.b, s.table, s.shape, s.grouped)
	if err != nil {
		return err
	}
	env := claim.Env{DB: s.b.db, Stmts: s.b.stmts, Writer: s.b.writer, Dialect: s.b.d, Table: t, SQL: s.b.d.Inbox(t.Table, t.Times), Clock: s.b.clock,
		Lease: s.cfg.lease, Rescan: s.b.poll, Conns: s.b.claimConns(), Budget: s.b.budget}
	if s.grouped {
		env.Group = s.group
	}
	c, err := s.cfg.form.New(env)
	if err != nil {
		return fmt.Errorf("inbox: subscription %q: %w", s.cfg.name, err)
	}
	s.claimer = c
	return nil
}

// task is one claimed job handed to a worker goroutine.
type task struct {
	j  *claim.Job
	at time.Time // when its claim was sent
}

// claimReq asks a claim goroutine for a claim.
type claimReq struct {
	asked int
	gen   uint64 // the wake generation when the claim was asked for
}

type claimResult struct {
	at    time.Time // on the broker's clock, when the claim was sent
	asked int
	jobs  []*claim.Job
	err   error
	gen   uint64 // the wake generation when the claim started
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
	if s.claimer == nil {
		if err := untilReachable(ctx, s.b, "checking table "+s.table, func() error { return s.check(ctx) }); err != nil {
			if ctx.Err() != nil {
				return nil // stopped before the database came back
			}
			return err
		}
	}
	b, log := s.b, s.b.log.With("subscription", s.cfg.name)
	waiter := b.hub.Subscribe(s.table, s.group)
	defer waiter.Close()
	if b.listener != nil {
		// Claim only once notifications of the table reach this process,
		// so no row written between the first claim and the LISTEN waits
		// for a poll. A listener that cannot connect does not hold the
		// subscription up: the poll is the floor.
		b.listener.Listen(s.table)
		t := time.NewTimer(listenWait)
		select {
		case <-b.listener.Listening(s.table):
		case <-t.C:
			log.Warn("inbox: not listening for notifications yet; claiming on the poll meanwhile", "table", s.table, "waited", listenWait)
		case <-ctx.Done():
		}
		t.Stop()
	}

	// Handlers run on a context that outlives ctx by ShutdownTimeout.
	handlerCtx, cancelHandlers := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelHandlers(nil)
	var handlers sync.WaitGroup

	// A form whose claim takes a row for every free worker (lease,
	// advisory) keeps one claim in flight: workers freed meanwhile join the
	// next claim, so a busy subscription claims in large batches (Postgres,
	// 2 instances x 100 workers, 30k no-op jobs: 8.3k jobs/s with a claim
	// per free worker in flight, 16.7k with one). A form that takes one row
	// a claim (row lock) keeps one in flight per free worker, within the
	// connection budget. SQLite has one writer: one claim in flight.
	maxClaims := 1
	if b.d.Kind == dialect.Postgres && s.claimer.Batch() != 0 {
		maxClaims = b.claimConns()
	}
	conns := b.claimConns()
	var (
		free     = s.cfg.workers
		inflight = 0
		idle     = false
		wakeGen  uint64
		failures = 0
		quick    = 0 // claims sent again at once after failing on a dead connection
		slow     = 0 // failed claims since the last that worked, past the quick ones
		lastErr  string
		results  = make(chan claimResult, s.cfg.workers+1)
		// A worker is free once its handler returns; the row's settlement
		// (the ack, mostly) goes on beside the next handler, at most as many
		// in flight as there are workers, so no worker waits on a commit.
		settling    = 0
		settleSlots = make(chan struct{}, s.cfg.workers)
		// Workers count what they freed and what is settling, and kick the
		// loop when it has something to decide: in the lease form with one
		// claim in flight, at the first worker freed, at half of them and at
		// all (the gather's points), and when the last settlement ends; in
		// the forms that hold a connection a job (row lock, advisory), and
		// with several claims in flight, at every freeing and every
		// settlement's end (a connection freed may be what the loop waits
		// on, see Held). The loop reads the counts on every turn. Kicks
		// that come while the loop is busy fold into one. (A kick a job
		// woke the loop about once a job; with these, and the acker woken
		// likewise, a Postgres drain of 200k jobs 2x100 took 5.2-5.8 us of
		// the process's CPU a job, against 5.9-6.3, four runs each.)
		freed, settlingN, handlingN atomic.Int64
		kick                        = make(chan struct{}, 1)
		poll                        = b.clock.NewTimer(b.poll)
		stopping                    = false
		// Claims outlive ctx so that rows a claim took at the stop are
		// known and given back; they are cut ShutdownTimeout after it.
		claimCtx, cancelClaims = context.WithCancel(context.WithoutCancel(ctx))
		batch                  = s.claimer.Batch()
		ctxDone                = ctx.Done()
		pollArmed              = true
		pollDue                = b.clock.Now().Add(b.poll)
		// A claim that found nothing holds the next wake-driven claim for
		// wakeCooldown (host time: it paces statements, not the table's
		// time), so a burst of wakes costs a few claims; a claim that found
		// rows holds nothing, so a steady trickle is picked up at once.
		lastShort time.Time
		cooling   bool
		coolTimer = time.NewTimer(time.Hour)
		// In a form whose claim takes a row for every free worker (lease,
		// advisory), a claim for fewer than half the workers, while the
		// others are busy, waits up to claimGather for more of them to free
		// up: under a backlog claims stay large, and a commit is paid per
		// many rows. On Postgres, where each claim's commit waits for a WAL
		// flush, a claim under a backlog (the last claim came back full)
		// waits so for all the workers (lease, 200k jobs 2x100: 59 rows a
		// claim and 110-116k jobs/s waiting for half, 86 and 121-124k
		// waiting for all); SQLite commits without a flush, and waiting
		// for all there cost more than it saved (100k jobs 1x100: 113k ->
		// 92-95k jobs/s). Host time too; a subscription with every worker
		// free claims at once, and after a short claim only half are
		// waited for, so a trickle is not held. Row lock takes a row a
		// claim: it never waits.
		gatherAll   = b.d.Kind == dialect.Postgres
		backlog     bool
		gathered    bool
		gathering   bool
		gatherTimer = time.NewTimer(time.Hour)
	)
	coolTimer.Stop()
	gatherTimer.Stop()
	// Worker goroutines are kept: one handles a job, settles it once
	// another goroutine may take the next job (or hands a lease ack to the
	// form), then waits for a task. A job goes to a goroutine that waits,
	// or to a new one when none does, so there are at most about twice as
	// many as workers (handling, and settling), and no job pays for a
	// goroutine's start and stack growth.
	tasks := make(chan task) // closed when the loop ends
	// A settlement ends here, on the worker after its freeing, or on the
	// form's own goroutine for an ack the form sends without a waiter.
	var acking sync.WaitGroup // acks sent without a waiter, not yet answered
	kickEach := !s.leaseForm || maxClaims > 1
	endSettlement := func() {
		<-settleSlots
		if settlingN.Add(-1) == 0 || kickEach {
			poke(kick)
		}
	}
	firstFree, halfFree := int64(s.cfg.workers-1), int64(s.cfg.workers-(s.cfg.workers+1)/2)
	// An ack sent without a waiter keeps its handling in an ackWait until
	// it is answered; they are reused, with the callback each was made
	// with (two allocations a job fewer).
	var waits sync.Pool
	waits.New = func() any {
		w := &ackWait{}
		w.done = func(err error) {
			if err != nil && deadConn(err) && !errors.Is(err, claim.ErrLost) {
				// Sent again, fenced, on another connection; not on the
				// form's goroutine, which this call must not hold up.
				go func() {
					s.reportAck(log, &w.h, again(func() error { return w.h.j.Ack(context.Background()) }))
					endSettlement()
					acking.Done()
					w.h = handling{}
					waits.Put(w)
				}()
				return
			}
			s.reportAck(log, &w.h, err)
			endSettlement()
			acking.Done()
			w.h = handling{}
			waits.Put(w)
		}
		return w
	}
	worker := func(t task) {
		defer handlers.Done()
		w := s.newWatch(log)
		for ok := true; ok; t, ok = <-tasks {
			s.awaitOverrun(t.j.ID)
			h := s.work(handlerCtx, w, t.j, t.at)
			// A claim's Jobs may share one slab (claim.Scanner): the user's
			// row is dropped now, so a job still in work does not keep its
			// claim-mates' rows (and payloads) alive.
			t.j.Value = nil
			settleSlots <- struct{}{}
			settlingN.Add(1)
			freed.Add(1)
			if left := handlingN.Add(-1); kickEach || left == firstFree || left == halfFree || left == 0 {
				poke(kick)
			}
			if a, async := h.j.Settler.(claim.AsyncAcker); async && h.err == nil && !h.lost {
				acking.Add(1)
				aw := waits.Get().(*ackWait)
				aw.h = h
				a.AckAsync(aw.done)
				continue
			}
			s.settleHandling(log, &h)
			endSettlement()
		}
	}
	// Claims are sent from kept goroutines too: a claim goes to one that
	// waits, or to a new one when none does yet (about one for each claim
	// in flight): a new goroutine's stack grows again through the driver's
	// calls on every claim (stack copying was 6% of the process's CPU in a
	// Postgres drain). They end when the loop does, which waits for the
	// claims in flight first.
	claims := make(chan claimReq)
	claiming := func(r claimReq) {
		for ok := true; ok; r, ok = <-claims {
			at := b.clock.Now()
			jobs, err := s.claimer.Claim(claimCtx, r.asked)
			results <- claimResult{at: at, asked: r.asked, jobs: jobs, err: err, gen: r.gen}
		}
	}
	defer close(claims)
	defer func() { poll.Stop(); coolTimer.Stop(); gatherTimer.Stop(); cancelClaims() }()
	cool := func() {
		if wait := wakeCooldown - time.Since(lastShort); wait > 0 {
			cooling = true
			coolTimer.Reset(wait)
		}
	}
	var cut *time.Timer // cuts the claims ShutdownTimeout after the stop
	defer func() {
		if cut != nil {
			cut.Stop()
		}
	}()
	stop := func() {
		stopping = true
		ctxDone = nil
		cut = time.AfterFunc(s.cfg.shutdown, cancelClaims)
	}
	rearm := func(d time.Duration) {
		poll.Stop()
		pollDue = b.clock.Now().Add(d)
		poll = b.clock.NewTimer(d)
		pollArmed = true
	}

	for {
		free += int(freed.Swap(0))
		settling = int(settlingN.Load())
		for !stopping && !idle && !cooling && free > 0 && inflight < maxClaims && inflight+s.claimer.Held() < conns {
			if batch == 0 && !gathered && (free*2 < s.cfg.workers || gatherAll && backlog && free < s.cfg.workers) {
				if !gathering {
					gathering = true
					gatherTimer.Reset(claimGather)
				}
				break
			}
			gathered = false
			k := min(free, dialect.MaxClaim)
			if batch > 0 {
				k = min(k, batch)
			}
			free -= k
			inflight++
			gen := wakeGen
			s.stats.claims.Add(1)
			select {
			case claims <- claimReq{asked: k, gen: gen}: // a claim goroutine waits
			default:
				go claiming(claimReq{asked: k, gen: gen})
			}
		}
		if stopping && inflight == 0 {
			s.setIdle(false, time.Time{}, nil)
			break
		}
		var pollC <-chan time.Time
		if pollArmed {
			pollC = poll.C()
		}
		var pollAt time.Time
		if pollArmed {
			pollAt = pollDue
		}
		s.setIdle(idle && !stopping && inflight == 0 && free == s.cfg.workers && settling == 0, pollAt, waiter.C())
		select {
		case r := <-results:
			if !stopping && ctx.Err() != nil {
				// The stop and this claim came together: the stop wins, and
				// the rows are given back unstarted.
				stop()
			}
			inflight--
			free += r.asked - len(r.jobs)
			backlog = r.err == nil && len(r.jobs) == r.asked
			s.stats.claimed.Add(int64(len(r.jobs)))
			for _, j := range r.jobs {
				if stopping {
					s.release(log, j)
					free++
					continue
				}
				t := task{j: j, at: r.at}
				handlingN.Add(1)
				select {
				case tasks <- t: // a worker goroutine waits
				default:
					handlers.Add(1)
					go worker(t)
				}
			}
			switch {
			case r.err != nil:
				// An unreachable database is logged once until it is back;
				// any other failure (a dropped or altered table) each time,
				// at the backoff's pace.
				failures++
				if msg := r.err.Error(); !unreachable(r.err) || msg != lastErr {
					log.Error("inbox: claim failed; retrying with backoff", "table", s.table, "err", r.err, "failures", failures)
					lastErr = msg
				}
				if deadConn(r.err) && quick <= conns {
					// Failed on a connection that had ended: the pool
					// dropped it, and the next claim takes another, at
					// once (each such failure ends one dead connection).
					quick++
					break
				}
				// Repeated failures back off from minReconnect, doubling;
				// a wake meanwhile is kept: the claim at the backoff's end
				// is the one it asks for.
				slow++
				idle = true
				rearm(min(minReconnect<<min(slow-1, 9), maxReconnect))
			case len(r.jobs) < r.asked && r.gen == wakeGen:
				if failures > 0 {
					log.Info("inbox: claims work again", "table", s.table)
					failures, lastErr, quick, slow = 0, "", 0, 0
				}
				idle = true
				if len(r.jobs) == 0 {
					lastShort = time.Now()
				}
				rearm(b.poll)
			case len(r.jobs) < r.asked:
				// Woken while the claim ran: claim again, after the cooldown
				// if this one found nothing at all.
				if len(r.jobs) == 0 {
					lastShort = time.Now()
					cool()
				}
			default:
				if failures > 0 {
					log.Info("inbox: claims work again", "table", s.table)
					failures, lastErr, quick, slow = 0, "", 0, 0
				}
			}
		case <-kick:
			// The counts are read at the top of the loop.
		case <-waiter.C():
			wakeGen++
			if failures == 0 && idle {
				idle = false
				cool()
			}
		case <-coolTimer.C:
			cooling = false
		case <-gatherTimer.C:
			gathering, gathered = false, true
		case <-pollC:
			// Like a wake: a claim in flight now may have started too early
			// to see what the poll is for.
			pollArmed = false
			wakeGen++
			idle = false
		case <-ctxDone:
			stop()
		}
	}

	close(tasks)
	// Stopped claiming: let running handlers finish within the timeout.
	// Nothing reads the kicks any more; a worker's kick never blocks.
	finished := make(chan struct{})
	go func() { handlers.Wait(); acking.Wait(); close(finished) }()
	deadline := b.clock.NewTimer(s.cfg.shutdown)
	defer deadline.Stop()
	select {
	case <-finished:
		return nil
	case <-deadline.C():
	}
	cancelHandlers(fmt.Errorf("inbox: subscription %q: shutdown timeout %v passed", s.cfg.name, s.cfg.shutdown))
	log.Warn("inbox: handlers still running at the shutdown timeout; their contexts are cancelled", "timeout", s.cfg.shutdown)
	// A handler that ignores its context is left behind after one more
	// timeout: its row comes back when its lease or connection ends.
	grace := time.NewTimer(s.cfg.shutdown)
	defer grace.Stop()
	select {
	case <-finished:
	case <-grace.C:
		log.Error("inbox: handlers ignore their cancelled context; Run returns without them", "timeout", s.cfg.shutdown)
	}
	return nil
}

// poke sends on a channel of capacity one unless a send is pending already.
func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// listenWait bounds how long a subscription waits for its notifications
// before its first claim.
const listenWait = 5 * time.Second

// claimGather is the longest a claim for few workers waits for more.
const claimGather = time.Millisecond

// wakeCooldown is the least time between a claim that found nothing and
// the next claim a wake starts.
const wakeCooldown = 2 * time.Millisecond

// settleTimeout bounds a settlement statement, which must not be cut short
// by the subscription's own shutdown.
const settleTimeout = 30 * time.Second

func (s *Subscription) release(log *slog.Logger, j *claim.Job) {
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	if err := j.Release(ctx); err != nil {
		log.Warn("inbox: could not give back an unstarted row; it waits out its lease", "table", s.table, "id", j.ID, "err", err)
		return
	}
	s.stats.released.Add(1)
	if s.cfg.observe != nil {
		now := s.b.clock.Now()
		s.cfg.observe(Event{Subscription: s.cfg.name, ID: j.ID, Attempt: j.Attempts + 1, Start: now, End: now, Outcome: Released})
	}
}

// ackWait holds a handling while its ack is in flight without a waiter.
type ackWait struct {
	h    handling
	done func(error) // reports the ack and puts the ackWait back
}

// handling is what a worker keeps of one handled job until it is settled.
type handling struct {
	j    *claim.Job
	err  error // the handler's
	lost bool  // the lease was taken over while the handler ran
	ev   Event
}

// work runs the handler on one job, on the calling goroutine, while the
// worker's watch ends its context at the timeout and extends its lease. It
// returns what the settlement needs, which the caller runs once the worker
// is free for the next job.
func (s *Subscription) work(ctx context.Context, w *watch, j *claim.Job, claimedAt time.Time) handling {
	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	now := s.b.clock.Now()
	h := handling{j: j, ev: Event{Subscription: s.cfg.name, ID: j.ID, Attempt: max(j.Attempts, 1), Start: now, Outcome: Failed}}
	s.shape.setLease(reflect.ValueOf(j.Value).Elem(), j.Lease)

	// The watch first, then the handler: a test on a fake clock that sees
	// the handler start finds its timer armed.
	w.begin(j, cancel, now, claimedAt)
	if holder, ok := j.Settler.(claim.Holder); ok {
		stop := context.AfterFunc(holder.Hold(), w.loseHold)
		defer stop()
	}
	err := j.Err // a row that cannot be read is a failure, without the handler
	if err == nil && s.counts && j.Attempts > s.cfg.maxAttempts {
		err = fmt.Errorf("inbox: row %d of %q was claimed %d times, more than MaxAttempts (%d): its earlier handlings never settled (their process died, or their handler never returned); parked without running the handler", j.ID, s.table, j.Attempts, s.cfg.maxAttempts)
	}
	if err == nil {
		err = s.call(hctx, j)
	}
	h.lost = w.finish()
	if cause := context.Cause(hctx); err != nil && errors.Is(cause, ErrTimeout) && err != cause && !errors.Is(err, context.Canceled) {
		// The handler's own error, beside the timeout; one that is the
		// context's error says nothing more.
		err = fmt.Errorf("%w (the handler returned: %v)", cause, err)
	} else if err != nil && errors.Is(cause, ErrTimeout) {
		err = cause
	}
	h.err, h.ev.Err = err, err
	return h
}

// watch keeps the times of the handler a worker runs on one timer, armed
// for the earliest that is due: the timeout, the lease extension and the
// lease's end. The extension is due a third of the lease before it ends and
// runs beside the handler. If the lease ends with no extension confirmed
// (none sent, failed, or still in flight), the handler is told at once (its
// context ends with ErrLeaseLost): another claimer may take the row from
// then on. Once the lease is lost its end is not a time due any more, so the
// timer never fires for a time already past. At the timeout the handler's
// context ends with ErrTimeout and the lease is no longer extended.
//
// A worker keeps its watch, and on the host's clock its timer too: a timer
// armed for one job fires no later than what the next job needs (the times
// of later jobs come later), so it stays armed for them, and when it fires
// early it is armed again for what is due then. Most handlers return long
// before any time is due, so a busy worker arms its timer about once a
// lease, not once a job: a timer's start and stop take the runtime's timer
// lock and three allocations (Postgres drain, 200k jobs 2x100, four runs
// each: 5.0-5.2 -> 4.6-4.9 us of the process's CPU a job). On
// any other clock the timer is armed for exactly the next time due and
// stopped when the handler returns, so a test sees just the timers in use.
type watch struct {
	s     *Subscription
	log   *slog.Logger
	every time.Duration // the lease's extension period
	keep  bool          // the timer outlives a job (the host's clock)

	mu        sync.Mutex
	timer     clock.Timer
	timerAt   time.Time // when timer fires; zero with none armed
	gen       int       // the armed timer; a callback of an older one does nothing
	j         *claim.Job
	cancel    context.CancelCauseFunc
	leased    bool      // the lease form: the lease is extended and can run out
	deadline  time.Time // zero once passed
	extendAt  time.Time // zero while an extension is in flight or none is due
	expires   time.Time // the earliest the lease can end
	handled   bool      // no handler runs
	lost      bool
	extending chan struct{} // closed when the extension in flight ends; nil when none is
}

// newWatch returns a worker's watch.
func (s *Subscription) newWatch(log *slog.Logger) *watch {
	return &watch{s: s, log: log, every: s.cfg.lease * 2 / 3, keep: clock.OnHost(s.b.clock), handled: true}
}

// begin watches the handler of j, started at now.
func (w *watch) begin(j *claim.Job, cancel context.CancelCauseFunc, now, claimedAt time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.j, w.cancel, w.handled, w.lost = j, cancel, false, false
	w.deadline = now.Add(w.s.cfg.timeout)
	w.leased = !j.Lease.IsZero() && w.s.leaseForm
	w.extendAt, w.expires = time.Time{}, time.Time{}
	if w.leased {
		// The lease runs from the claim's statement, which was sent at
		// claimedAt: count from there, not from the handler's start, which
		// a loaded machine may delay by a good part of the lease.
		w.expires = claimedAt.Add(w.s.cfg.lease)
		w.extendAt = claimedAt.Add(w.every)
	}
	w.arm()
}

// arm sees that the timer fires by the earliest time due; w.mu is held.
func (w *watch) arm() {
	var next time.Time
	if !w.handled {
		next = w.deadline
		if w.leased && !w.lost {
			for _, t := range []time.Time{w.extendAt, w.expires} {
				if !t.IsZero() && (next.IsZero() || t.Before(next)) {
					next = t
				}
			}
		}
	}
	switch {
	case w.timer == nil:
	case next.Equal(w.timerAt):
		return
	case w.keep && (next.IsZero() || !w.timerAt.After(next)):
		return // fires by then, or is kept for the next job
	default:
		w.stop()
	}
	if next.IsZero() {
		return
	}
	w.gen++
	gen := w.gen
	w.timerAt = next
	// The clock is read again: now may be old by a statement, and a fake
	// clock may have moved meanwhile.
	w.timer = clock.AfterFunc(w.s.b.clock, max(next.Sub(w.s.b.clock.Now()), 0), func() { w.fire(gen) })
}

// stop stops the timer; w.mu is held.
func (w *watch) stop() {
	w.timer.Stop()
	w.timer, w.timerAt = nil, time.Time{}
	w.gen++
}

// fire acts on every time that is due, then arms the timer for the next.
func (w *watch) fire(gen int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if gen != w.gen {
		return
	}
	w.timer, w.timerAt = nil, time.Time{}
	if w.handled {
		return // armed for a job done: the next one arms its own
	}
	now := w.s.b.clock.Now()
	if !w.deadline.IsZero() && !now.Before(w.deadline) {
		w.deadline = time.Time{}
		w.extendAt = time.Time{} // no more extensions; one in flight is awaited
		w.cancel(fmt.Errorf("%w after %v", ErrTimeout, w.s.cfg.timeout))
	}
	if w.leased && !w.lost && !now.Before(w.expires) {
		// Even with an extension in flight: from now on another claimer may
		// take the row, so the handler is told now, not when the extension
		// answers (up to settleTimeout later). A late success changes
		// nothing: the row comes back when the extended lease runs out.
		w.loseLease("lease ran out with no extension confirmed", nil)
	}
	if w.leased && !w.lost && !w.extendAt.IsZero() && !now.Before(w.extendAt) {
		w.extendAt = time.Time{}
		done := make(chan struct{})
		w.extending = done
		go w.extend(w.j, now, done)
	}
	w.arm()
}

// extend sends the extension of j's lease and acts on its answer. The
// worker's next job waits for it (see finish), so w.j is j throughout.
func (w *watch) extend(j *claim.Job, sent time.Time, done chan struct{}) {
	defer close(done)
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	err := j.Extend(ctx, w.s.cfg.lease)
	cancel()

	w.mu.Lock()
	defer w.mu.Unlock()
	w.extending = nil
	timedOut := w.deadline.IsZero()
	now := w.s.b.clock.Now()
	switch {
	case w.handled || w.lost:
		return // the handler is done or told: the outcome decides
	case errors.Is(err, claim.ErrLost):
		w.loseLease("lease lost while the handler ran", err)
	case err != nil && !now.Before(w.expires):
		w.loseLease("lease ran out while its extension failed", err)
	case err != nil:
		w.log.Warn("inbox: lease extension failed; trying again", "table", w.s.table, "id", j.ID, "err", err)
		if !timedOut {
			w.extendAt = now.Add(w.every / 4)
		}
	default:
		w.expires = sent.Add(w.s.cfg.lease)
		if !timedOut {
			w.extendAt = sent.Add(w.every)
		}
	}
	w.arm()
}

// loseLease tells the handler its lease is gone; w.mu is held.
func (w *watch) loseLease(why string, err error) {
	w.lost = true
	w.s.stats.lost.Add(1)
	w.s.overran(w.j.ID)
	w.log.Warn("inbox: "+why+"; the handler is told and its outcome will change nothing", "table", w.s.table, "id", w.j.ID, "err", err)
	w.cancel(ErrLeaseLost)
}

// loseHold tells the handler that the connection holding its row ended.
func (w *watch) loseHold() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.handled || w.lost {
		return
	}
	w.lost = true
	w.s.stats.lost.Add(1)
	w.s.overran(w.j.ID)
	w.log.Warn("inbox: the connection holding the row ended; the handler is told and its outcome will change nothing", "table", w.s.table, "id", w.j.ID)
	w.cancel(ErrHoldLost)
}

// finish ends the watch of a handler that has returned: it waits for an
// extension in flight and reports whether the lease was lost. On a clock
// other than the host's the timer is stopped.
func (w *watch) finish() (lost bool) {
	w.mu.Lock()
	w.handled = true
	w.arm()
	extending := w.extending
	w.mu.Unlock()
	if extending != nil {
		<-extending
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	lost = w.lost
	if lost {
		w.s.returned(w.j.ID)
	}
	w.j, w.cancel = nil, nil
	return lost
}

// overran records that the handler of id runs on after its row was lost:
// the row may come back to this process meanwhile, and its next handling
// must wait for this one (see awaitOverrun).
func (s *Subscription) overran(id int64) {
	s.overrunMu.Lock()
	defer s.overrunMu.Unlock()
	if s.overrun == nil {
		s.overrun = map[int64]chan struct{}{}
	}
	s.overrun[id] = make(chan struct{})
	s.overruns.Add(1)
}

// returned ends what overran recorded, once the handler returned.
func (s *Subscription) returned(id int64) {
	s.overrunMu.Lock()
	defer s.overrunMu.Unlock()
	if ch, ok := s.overrun[id]; ok {
		close(ch)
		delete(s.overrun, id)
		s.overruns.Add(-1)
	}
}

// awaitOverrun waits, before a handling of id starts, for a handler of the
// same id that lost its row and still runs: one process never runs two
// handlers of one id at once. It costs an atomic load while none overruns.
func (s *Subscription) awaitOverrun(id int64) {
	if s.overruns.Load() == 0 {
		return
	}
	s.overrunMu.Lock()
	ch := s.overrun[id]
	s.overrunMu.Unlock()
	if ch != nil {
		<-ch
	}
}

// settleHandling settles a handled job and reports its event.
func (s *Subscription) settleHandling(log *slog.Logger, h *handling) {
	var serr error
	h.ev.Outcome, serr = s.settle(log, h.j, h.err, h.lost)
	if h.ev.Outcome == Failed {
		h.ev.Err = errors.Join(h.ev.Err, serr)
	}
	if s.cfg.observe != nil {
		h.ev.End = s.b.clock.Now()
		s.cfg.observe(h.ev)
	}
}

// reportAck counts and reports an ack the form answered on its own.
func (s *Subscription) reportAck(log *slog.Logger, h *handling, err error) {
	h.ev.Outcome = Acked
	if err != nil {
		h.ev.Outcome = s.settleFailed(log, h.j, "ack", err)
		if h.ev.Outcome == Failed {
			h.ev.Err = err
		}
	} else {
		s.stats.acked.Add(1)
	}
	if s.cfg.observe != nil {
		h.ev.End = s.b.clock.Now()
		s.cfg.observe(h.ev)
	}
}

// settleTries is how often a settlement that failed on a dead connection is
// sent again: each failure ends one dead connection of the pool, and the
// statements are fenced, so a repeat changes nothing that the first did.
const settleTries = 3

// again runs a settlement, and again while it fails on a dead connection
// (never one whose hold was lost: that is ErrLost, and final).
func again(f func() error) error {
	err := f()
	for i := 1; i < settleTries && err != nil && deadConn(err) && !errors.Is(err, claim.ErrLost); i++ {
		err = f()
	}
	return err
}

// settle acks, retries, parks or snoozes a job whose handler returned err,
// and returns the outcome, with the settlement's error when it failed.
func (s *Subscription) settle(log *slog.Logger, j *claim.Job, err error, lost bool) (Outcome, error) {
	if lost {
		if f, ok := j.Settler.(claim.Forgetter); ok {
			f.Forget() // never settled: the form stops counting it in work
		}
		return Lost, nil
	}
	if err == nil {
		// Every form bounds its own ack (claim.Settler): no timer a job here.
		if serr := again(func() error { return j.Ack(context.Background()) }); serr != nil {
			return s.settleFailed(log, j, "ack", serr), serr
		}
		s.stats.acked.Add(1)
		return Acked, nil
	}
	sctx, scancel := context.WithTimeout(context.Background(), settleTimeout)
	defer scancel()
	var (
		se *SnoozeError
		pe *ParkError
		re *RetryError
	)
	attempt := max(j.Attempts, 1)
	switch {
	case errors.As(err, &se):
		if serr := again(func() error { return j.Snooze(sctx, se.Delay) }); serr != nil {
			return s.settleFailed(log, j, "snooze", serr), serr
		}
		s.stats.snoozed.Add(1)
		return Snoozed, nil
	case errors.As(err, &pe) || s.counts && attempt >= s.cfg.maxAttempts:
		if serr := again(func() error { return j.Park(sctx, err.Error()) }); serr != nil {
			return s.settleFailed(log, j, "park", serr), serr
		}
		s.stats.parked.Add(1)
		log.Warn("inbox: row parked", "table", s.table, "id", j.ID, "attempts", attempt, "err", err)
		return Parked, nil
	}
	var delay time.Duration
	switch {
	case errors.As(err, &re):
		delay = re.Delay
	case s.cfg.backoff != nil:
		delay = s.cfg.backoff(attempt)
	default:
		delay = jittered(j.ID, attempt)
	}
	if serr := again(func() error { return j.Retry(sctx, delay, err.Error()) }); serr != nil {
		return s.settleFailed(log, j, "retry", serr), serr
	}
	s.stats.retried.Add(1)
	log.Debug("inbox: handler failed; row retried", "table", s.table, "id", j.ID, "attempt", attempt, "delay", delay, "err", err)
	return Retried, nil
}

func (s *Subscription) settleFailed(log *slog.Logger, j *claim.Job, what string, err error) Outcome {
	if errors.Is(err, claim.ErrLost) {
		s.stats.lost.Add(1)
		log.Warn("inbox: claim lost before "+what+" (its lease was taken over, or the connection holding it ended); the row is someone else's now and this outcome changes nothing", "table", s.table, "id", j.ID, "err", err)
		return Lost
	}
	s.stats.failed.Add(1)
	log.Error("inbox: "+what+" failed; the row comes back after its lease", "table", s.table, "id", j.ID, "err", err)
	return Failed
}

// call runs the handler, turning a panic into an error that carries the
// panic's text.
func (s *Subscription) call(ctx context.Context, j *claim.Job) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
			s.b.log.Error("inbox: handler panicked; the row is retried", "subscription", s.cfg.name, "id", j.ID, "panic", p, "stack", string(debug.Stack()))
		}
	}()
	return s.handle(ctx, j.Value)
}
