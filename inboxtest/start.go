package inboxtest

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/inbox"
)

// Timeout bounds every wait of this kit: a service's start and stop, an
// idle subscription, a drained table, a handling. A wait that passes it fails
// the test saying what it waited for and what is left. The machines tests
// run on are shared and noisy: keep it generous.
var Timeout = 30 * time.Second

// Run is a service running for one test's life.
type Run struct {
	Service *inbox.Service
	// Clock is the fake clock the service's broker reads; nil for StartLive.
	Clock *clock.Fake
	t     testing.TB
}

// runs are the services running on each fake clock: Advance waits for all
// of them, since instances sharing a clock share its moments.
var runs struct {
	sync.Mutex
	on map[*clock.Fake][]*Run
}

// Start runs svc until the test's cleanup, on the fake clock of its broker:
// make the broker with NewBroker, or tell the kit its clock with UseClock.
// Nothing that waits on the clock (polls, backoffs, leases, the shutdown
// timeout) moves until the test calls Advance. Start returns once every
// subscription has checked its table and started claiming; a startup hook or
// table check that fails fails the test. It turns off svc.Signals. At cleanup
// the service is stopped and the test fails if it did not stop within
// Timeout (on a fake clock a handler still running is not cut off by
// ShutdownTimeout unless the clock is advanced).
func Start(t testing.TB, svc *inbox.Service) *Run {
	t.Helper()
	c := ClockOf(svc.Broker())
	if c == nil {
		t.Fatalf("inboxtest: Start runs service %q on a fake clock, but its broker's clock is unknown to the kit: make the broker with inboxtest.NewBroker, or open it with inbox.WithClock(c) and call inboxtest.UseClock(t, broker, c); or use StartLive for the real clock", svc.Name)
	}
	return start(t, svc, c)
}

// StartLive is Start on whatever clock the broker reads, the host's by
// default: for tests of what a fake clock cannot drive, such as rows another
// program writes or Postgres notifications. Its Run has no Clock.
func StartLive(t testing.TB, svc *inbox.Service) *Run {
	t.Helper()
	return start(t, svc, nil)
}

func start(t testing.TB, svc *inbox.Service, c *clock.Fake) *Run {
	t.Helper()
	r := &Run{Service: svc, Clock: c, t: t}
	svc.Signals = false
	ctx, cancel := context.WithCancel(context.Background())
	finished := make(chan struct{})
	var runErr error
	go func() {
		defer close(finished)
		runErr = svc.Run(ctx)
	}()
	if c != nil {
		runs.Lock()
		if runs.on == nil {
			runs.on = map[*clock.Fake][]*Run{}
		}
		runs.on[c] = append(runs.on[c], r)
		runs.Unlock()
	}
	startedOK := false
	t.Cleanup(func() {
		if c != nil {
			runs.Lock()
			runs.on[c] = slices.DeleteFunc(runs.on[c], func(x *Run) bool { return x == r })
			if len(runs.on[c]) == 0 {
				delete(runs.on, c)
			}
			runs.Unlock()
		}
		cancel()
		select {
		case <-finished:
			if runErr != nil && startedOK {
				t.Errorf("inboxtest: service %q stopped with: %v", svc.Name, runErr)
			}
		case <-time.After(Timeout):
			t.Errorf("inboxtest: service %q did not stop within %v of its cleanup (a handler still running? on a fake clock ShutdownTimeout passes only when the clock is advanced)", svc.Name, Timeout)
		}
	})
	select {
	case <-svc.Started():
		startedOK = true
	case <-finished:
		t.Fatalf("inboxtest: service %q stopped before it started: %v", svc.Name, runErr)
	case <-time.After(Timeout):
		t.Fatalf("inboxtest: service %q did not start within %v (a startup hook or table check blocking?)", svc.Name, Timeout)
	}
	return r
}

// Idle waits until every subscription of every service running on this
// run's clock (the run's own service, on the real clock) is idle: no claim
// in flight, no handler running, no wake or due poll left to take. It fails
// the test after Timeout, as when a handler blocks on the test itself.
func (r *Run) Idle() {
	r.t.Helper()
	services := []*inbox.Service{r.Service}
	if r.Clock != nil {
		runs.Lock()
		services = services[:0]
		for _, o := range runs.on[r.Clock] {
			services = append(services, o.Service)
		}
		runs.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	// Twice round: a handler of one service may have woken another's
	// subscription after that one was seen idle.
	for range 2 {
		for _, svc := range services {
			for _, sub := range svc.Subscriptions() {
				if err := sub.WaitIdle(ctx); err != nil {
					r.t.Fatalf("inboxtest: a subscription of service %q was not idle within %v: a claim or a handler still running (does a handler wait on the test?)", svc.Name, Timeout)
				}
			}
		}
	}
}

// Advance waits until the services on the run's clock are idle (Idle), then
// moves the clock forward by d, firing the polls, lease extensions and
// timers it passes, and wakes each subscription on the clock whose queue has
// a row that came due in the step (a retry's backoff or a delayed publish
// ending), as a publish would: such a row is claimed at this moment, not at
// the next poll. Rows that were available before the step (written by
// plain SQL, which wakes nobody) still wait for a poll. What the moment sets
// off then runs; wait for it on the queue (WaitDrained,
// Recorder.WaitNextHandled, ...).
func (r *Run) Advance(d time.Duration) {
	r.t.Helper()
	if r.Clock == nil {
		r.t.Fatalf("inboxtest: Advance on service %q started with StartLive: its clock is real", r.Service.Name)
	}
	r.Idle()
	from := r.Clock.Now()
	r.Clock.Advance(d)
	r.wakeDue(from, r.Clock.Now())
}

// wakeDue wakes each subscription on the run's clock whose queue has an
// available row whose locked_until is after from and at or before to.
func (r *Run) wakeDue(from, to time.Time) {
	r.t.Helper()
	runs.Lock()
	services := make([]*inbox.Service, 0, len(runs.on[r.Clock]))
	for _, o := range runs.on[r.Clock] {
		services = append(services, o.Service)
	}
	runs.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	for _, svc := range services {
		op := inbox.NewOperator(svc.Broker())
		for _, sub := range svc.Subscriptions() {
			ref := sub.Queue()
			due, err := cameDue(ctx, op, ref, from, to)
			if err != nil {
				r.t.Fatalf("inboxtest: Advance: read the rows of %s that came due: %v", ref.Table, err)
			}
			if due {
				svc.Broker().Wake(ref.Table, ref.Group)
			}
		}
	}
}

// cameDue reports whether ref has an available row whose locked_until is
// after from and at or before to.
func cameDue(ctx context.Context, op *inbox.Operator, ref inbox.QueueRef, from, to time.Time) (bool, error) {
	filter := inbox.RowFilter{States: []string{"available"}, Limit: 1000}
	for {
		rows, err := op.Rows(ctx, ref, filter)
		if err != nil {
			return false, err
		}
		for _, row := range rows {
			if row.LockedUntil.After(from) && !row.LockedUntil.After(to) {
				return true, nil
			}
		}
		if len(rows) < filter.Limit {
			return false, nil
		}
		filter.After = rows[len(rows)-1].ID
	}
}

// Now is the time on the run's clock: the fake one, or the host's.
func (r *Run) Now() time.Time {
	if r.Clock != nil {
		return r.Clock.Now()
	}
	return time.Now()
}
