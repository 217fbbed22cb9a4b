package engine

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/internal/claim/contract"
	"github.com/sqlinbox/sqlinbox/internal/inboxtype"
)

// opts are a test engine's lease and timeout; zero means 30s and a minute.
type opts struct{ lease, timeout time.Duration }

// leaseClaimer is a claimer of a form whose hold expires.
type leaseClaimer struct{ contract.Claimer }

func (leaseClaimer) Traits() contract.Traits { return contract.Traits{HoldExpires: true} }

// testEngine is an engine of the lease form on clk, whose handler is handle.
func testEngine(clk clock.Clock, o opts, handle func(context.Context, *contract.Job) error) *Engine {
	if o.lease == 0 {
		o.lease = 30 * time.Second
	}
	if o.timeout == 0 {
		o.timeout = time.Minute
	}
	return New(Config{Name: "test", Table: "jobs", Workers: 1, MaxAttempts: 25, Lease: o.lease, Timeout: o.timeout,
		Shutdown: time.Second, Poll: time.Second, Clock: clk, Log: slog.New(slog.DiscardHandler), Claimer: leaseClaimer{},
		Counters: &Counters{}, Idle: NewIdle(clk), Callbacks: Callbacks{Handle: handle, Prepare: func(*contract.Job) {},
			ErrorVerdict: func(error) (Verdict, time.Duration) { return Retry, 0 }, Unreachable: func(error) bool { return false }, DeadConn: func(error) bool { return false }}})
}

// extendStub is a settler whose extensions fail, each call told on calls.
type extendStub struct {
	contract.Settler
	calls chan time.Duration
}

func (s extendStub) Extend(_ context.Context, lease time.Duration) error {
	s.calls <- lease
	return errors.New("database unreachable")
}

// watched runs one leased job through work on a fake clock, with a handler
// that reports its context's cause and returns only when told. It returns
// the handler's causes, the release of the handler, and work's result.
func watched(t *testing.T, clk *clock.Fake, o opts) (extends chan time.Duration, causes chan error, release chan struct{}, result chan handling) {
	t.Helper()
	extends = make(chan time.Duration, 8)
	causes, release, result = watchedWith(t, clk, clk, extendStub{calls: extends}, o)
	return extends, causes, release, result
}

// watchedWith is watched with the broker's clock (clk, over the fake) and
// the job's settler given.
func watchedWith(t *testing.T, clk clock.Clock, fake *clock.Fake, settler contract.Settler, o opts) (causes chan error, release chan struct{}, result chan handling) {
	t.Helper()
	causes, release = make(chan error, 1), make(chan struct{})
	e := testEngine(clk, o, func(ctx context.Context, _ *contract.Job) error {
		<-ctx.Done()
		causes <- context.Cause(ctx)
		<-release
		return ctx.Err()
	})
	result = make(chan handling, 1)
	j := &contract.Job{ID: 7, Lease: fake.Now().Add(e.cfg.Lease), Settler: settler}
	go func() { result <- e.work(context.Background(), e.newWatch(), j, fake.Now()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := fake.WaitTimers(ctx, 1); err != nil { // the handling's one timer
		t.Fatal(err)
	}
	return causes, release, result
}

// waitNext waits until the fake clock's earliest timer is due at at: the
// handling has armed its timer for that time.
func waitNext(t *testing.T, clk *clock.Fake, at time.Time, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := clk.WaitNext(ctx, at); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// A lease whose extensions keep failing runs out: the handler is told at
// once (ErrLeaseLost), and the handling is reported lost.
func TestLeaseRunsOutWhileExtensionsFail(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	extends, causes, release, result := watched(t, clk, opts{lease: 9 * time.Second})
	start := clk.Now()
	waitNext(t, clk, start.Add(6*time.Second), "the first extension")
	clk.Advance(6 * time.Second) // two thirds of the lease: the first extension
	<-extends
	waitNext(t, clk, start.Add(7500*time.Millisecond), "the extension tried again a quarter of 6s later")
	clk.Advance(1500 * time.Millisecond)
	<-extends
	select {
	case err := <-causes:
		t.Fatalf("handler told %v after failed extensions, with 1.5s of lease left", err)
	default:
	}
	waitNext(t, clk, start.Add(9*time.Second), "the lease's end")
	clk.Advance(1500 * time.Millisecond) // the lease's end
	waitCause(t, causes, inboxtype.ErrLeaseLost, "the lease ran out")
	close(release)
	if h := <-result; !h.lost {
		t.Fatal("a handling whose lease ran out is not reported lost")
	}
}

// At the timeout the handler's context ends with ErrTimeout and its lease
// is extended no more, even while the handler runs on.
func TestTimeoutEndsExtensions(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	extends, causes, release, result := watched(t, clk, opts{lease: 9 * time.Second, timeout: 5 * time.Second})
	clk.Advance(5 * time.Second)
	waitCause(t, causes, inboxtype.ErrTimeout, "the timeout passed")
	waitNext(t, clk, clk.Now().Add(4*time.Second), "the lease's end, and no extension before it")
	clk.Advance(2 * time.Second) // past the extension's time
	// A fired timer's function runs on a goroutine of its own: give a wrong
	// extension a generous while to show up.
	select {
	case <-extends:
		t.Fatal("the lease was extended after the handler timed out")
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	h := <-result
	if !errors.Is(h.err, inboxtype.ErrTimeout) || h.lost {
		t.Fatalf("handling ended with err %v, lost %v; want ErrTimeout, not lost", h.err, h.lost)
	}
}

// waitCause waits for the handler to report its context's cause, which
// must be want, since what happened.
func waitCause(t *testing.T, causes chan error, want error, what string) {
	t.Helper()
	select {
	case err := <-causes:
		if !errors.Is(err, want) {
			t.Fatalf("%s: the handler's context ended with %v, want %v", what, err, want)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s and the handler was not told within 30s", what)
	}
}

// countingClock counts the timers made on a fake clock.
type countingClock struct {
	*clock.Fake
	n atomic.Int64
}

func (c *countingClock) NewTimer(d time.Duration) clock.Timer {
	c.n.Add(1)
	return c.Fake.NewTimer(d)
}

// stalledExtend is a settler whose extension hangs until released, then
// succeeds.
type stalledExtend struct {
	contract.Settler
	started, release chan struct{}
}

func (s stalledExtend) Extend(context.Context, time.Duration) error {
	close(s.started)
	<-s.release
	return nil
}

// An extension still in flight at the lease's end does not hold the news
// back: the handler is told at the lease's end, and the handling is lost
// even when the extension succeeds later. Meanwhile the timer is not
// armed again and again for a time already past.
func TestLeaseRunsOutWhileExtensionStalls(t *testing.T) {
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	clk := &countingClock{Fake: fake}
	stub := stalledExtend{started: make(chan struct{}), release: make(chan struct{})}
	causes, release, result := watchedWith(t, clk, fake, stub, opts{lease: 9 * time.Second})
	start := fake.Now()
	fake.Advance(6 * time.Second) // the extension is sent, and stalls
	<-stub.started
	waitNext(t, fake, start.Add(9*time.Second), "the lease's end, with the extension in flight")
	armed := clk.n.Load()
	fake.Advance(3 * time.Second)
	waitCause(t, causes, inboxtype.ErrLeaseLost, "the lease ran out with its extension in flight")
	waitNext(t, fake, start.Add(time.Minute), "the timeout alone")
	if n := clk.n.Load() - armed; n > 2 {
		t.Fatalf("%d timers armed after the lease's end: the watch re-arms for a time already past", n)
	}
	close(stub.release) // the extension succeeds, late
	close(release)
	if h := <-result; !h.lost {
		t.Fatal("a handling told its lease was lost is not reported lost")
	}
}

// hostWatch returns a worker's watch of a lease-form subscription on the
// host's clock, and a job whose extensions are told on extends (and fail).
func hostWatch(t *testing.T, lease time.Duration) (w *watch, job func() *contract.Job, extends chan time.Duration) {
	t.Helper()
	e := testEngine(clock.Host{}, opts{lease: lease}, func(context.Context, *contract.Job) error { return nil })
	extends = make(chan time.Duration, 8)
	job = func() *contract.Job {
		return &contract.Job{ID: 7, Lease: time.Now().Add(lease), Settler: extendStub{calls: extends}}
	}
	return e.newWatch(), job, extends
}

// armedFor is when w's timer fires, zero with none armed.
func armedFor(w *watch) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.timerAt
}

// On the host's clock a worker keeps its timer from one job to the next
// while it fires by what the next job needs; a job that needs it sooner
// arms it for then, and its extension comes on time.
func TestWatchKeepsItsTimerForTheNextJob(t *testing.T) {
	w, job, extends := hostWatch(t, 30*time.Second) // extensions every 20s
	if !w.keep {
		t.Fatal("a watch on the host's clock does not keep its timer")
	}
	now := time.Now()
	_, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	w.begin(job(), cancel, now, now)
	first := armedFor(w)
	if want := now.Add(20 * time.Second); !first.Equal(want) {
		t.Fatalf("first job: timer armed for %v, want the extension's time %v", first, want)
	}
	w.finish()
	if !armedFor(w).Equal(first) {
		t.Fatalf("after the first job the timer is armed for %v, want it kept for %v", armedFor(w), first)
	}
	// A later job whose times come later keeps the timer as it is.
	later := now.Add(time.Second)
	w.begin(job(), cancel, later, later)
	if !armedFor(w).Equal(first) {
		t.Fatalf("a later job moved the timer to %v; it fires by what that job needs at %v", armedFor(w), first)
	}
	w.finish()
	// A job claimed 19.8s ago needs its extension in 0.2s: sooner.
	claimed := time.Now().Add(-19800 * time.Millisecond)
	w.begin(job(), cancel, time.Now(), claimed)
	due := claimed.Add(20 * time.Second)
	if !armedFor(w).Equal(due) {
		t.Fatalf("a job due sooner left the timer at %v, want %v", armedFor(w), due)
	}
	select {
	case <-extends:
		if now := time.Now(); now.Before(due) {
			t.Fatalf("extension sent at %v, before it was due at %v", now, due)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the extension of a job due sooner was not sent within 30s")
	}
	w.finish()
}

// A kept timer that fires for an earlier job while a later one runs does
// nothing for it but arm itself for what the later job needs.
func TestKeptTimerFiringEarlyWaitsForTheJobsOwnTime(t *testing.T) {
	w, job, extends := hostWatch(t, 3*time.Second) // extensions every 2s
	_, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	// The first job was claimed 1.9s ago: the timer fires in 0.1s.
	claimed := time.Now().Add(-1900 * time.Millisecond)
	w.begin(job(), cancel, time.Now(), claimed)
	early := armedFor(w)
	w.finish()
	now := time.Now()
	w.begin(job(), cancel, now, now)
	if !armedFor(w).Equal(early) {
		t.Fatalf("timer armed for %v, want the first job's %v kept", armedFor(w), early)
	}
	select {
	case <-extends:
		if at, due := time.Now(), now.Add(2*time.Second); at.Before(due) {
			t.Fatalf("the second job's lease was extended at %v, before its time %v: the first job's timer acted for it", at, due)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the second job's extension was not sent within 30s")
	}
	w.finish()
}

// On any other clock the timer is stopped when the handler returns, so a
// test sees only the timers in use.
func TestWatchOnAFakeClockStopsItsTimer(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	_, causes, release, result := watched(t, clk, opts{lease: 9 * time.Second, timeout: 5 * time.Second})
	clk.Advance(5 * time.Second) // the handler returns once its context ends
	waitCause(t, causes, inboxtype.ErrTimeout, "the timeout passed")
	close(release)
	<-result
	if n := clk.Pending(); n != 0 {
		t.Fatalf("%d timers pending on the fake clock after the handler returned, want 0", n)
	}
}

// A hold-lost callback of a job done, run late, after the worker began its
// next job, does not cancel that job.
func TestLateHoldLostOfAnEarlierJobLeavesTheNextAlone(t *testing.T) {
	w, job, _ := hostWatch(t, 30*time.Second)
	first, next := job(), job()
	_, cancel1 := context.WithCancelCause(context.Background())
	defer cancel1(nil)
	now := time.Now()
	w.begin(first, cancel1, now, now)
	w.finish()
	ctx2, cancel2 := context.WithCancelCause(context.Background())
	defer cancel2(nil)
	w.begin(next, cancel2, now, now)
	w.loseHold(first) // the first job's callback, started as its handler returned
	if err := context.Cause(ctx2); err != nil {
		t.Fatalf("the next job's context ended with %v after the first job's hold-lost callback", err)
	}
	if lost := w.finish(); lost {
		t.Fatal("the next job is reported lost by the first job's hold-lost callback")
	}
	w.begin(job(), cancel2, now, now)
	j := w.j
	w.loseHold(j)
	if !errors.Is(context.Cause(ctx2), inboxtype.ErrHoldLost) {
		t.Fatalf("a job's own hold-lost callback ended its context with %v, want ErrHoldLost", context.Cause(ctx2))
	}
	w.finish()
}

// stopSignalClock is a fake clock whose timers tell stopped when stopped.
type stopSignalClock struct {
	*clock.Fake
	stopped chan struct{}
}

func (c stopSignalClock) NewTimer(d time.Duration) clock.Timer {
	return stopSignalTimer{c.Fake.NewTimer(d), c.stopped}
}

type stopSignalTimer struct {
	clock.Timer
	stopped chan struct{}
}

func (t stopSignalTimer) Stop() bool {
	pending := t.Timer.Stop()
	signal(t.stopped)
	return pending
}

// An extension that lands after its handler returned moves the lease's
// end: the handling's holdEnds, until which a settlement that fails with
// the database is sent again, is the new lease's, not the one it replaced
// (else the settlement is given up two thirds of a lease early, and the
// row handled again after an outage shorter than its lease).
func TestExtensionLandingAfterTheHandlerMovesTheLeaseEnd(t *testing.T) {
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	clk := stopSignalClock{Fake: fake, stopped: make(chan struct{}, 1)}
	stub := stalledExtend{started: make(chan struct{}), release: make(chan struct{})}
	returned := make(chan struct{})
	e := testEngine(clk, opts{lease: 9 * time.Second}, func(context.Context, *contract.Job) error {
		<-returned
		return nil
	})
	start := fake.Now()
	j := &contract.Job{ID: 7, Lease: start.Add(9 * time.Second), Settler: stub}
	result := make(chan handling, 1)
	go func() { result <- e.work(context.Background(), e.newWatch(), j, start) }()
	waitNext(t, fake, start.Add(6*time.Second), "the extension's time")
	fake.Advance(6 * time.Second) // the extension is sent, and stalls
	<-stub.started
	waitNext(t, fake, start.Add(9*time.Second), "the lease's end, with the extension in flight")
	select {
	case <-clk.stopped: // a stop before the handler returned is not the one awaited
	default:
	}
	close(returned)
	// The handler returned: its watch stops its timer (a fake clock's), then
	// waits for the extension in flight.
	select {
	case <-clk.stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("the watch's timer was not stopped within 30s of the handler's return")
	}
	close(stub.release) // the extension lands
	h := <-result
	if want := start.Add(6*time.Second + 9*time.Second); !h.holdEnds.Equal(want) {
		t.Fatalf("the lease ends at %v after an extension sent at %v landed; want %v (the extended lease's end)", h.holdEnds, start.Add(6*time.Second), want)
	}
	if h.lost {
		t.Fatal("a handling whose extension landed is reported lost")
	}
}
