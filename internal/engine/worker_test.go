package engine

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/internal/claim/contract"
	"github.com/sqlinbox/sqlinbox/internal/inboxtype"
)

// endlessClaimer gives every claim all the rows it asks for, each acked by
// heldAcks.
type endlessClaimer struct {
	contract.Claimer
	acks   *heldAcks
	nextID atomic.Int64
}

func (c *endlessClaimer) Traits() contract.Traits { return contract.Traits{} }
func (c *endlessClaimer) Held() int               { return 0 }
func (c *endlessClaimer) Claim(ctx context.Context, max int) ([]*contract.Job, error) {
	jobs := make([]*contract.Job, max)
	for i := range jobs {
		jobs[i] = &contract.Job{ID: c.nextID.Add(1), Attempts: 1, Settler: asyncAck{acks: c.acks}}
	}
	return jobs, nil
}

// heldAcks keeps every ack unanswered until released (or answers each
// with fail, when set), and records the most that were ever unanswered at
// once.
type heldAcks struct {
	mu      sync.Mutex
	held    []func(error)
	most    int
	reached chan struct{} // closed when want acks are held
	want    int
	free    bool
	fail    error
}

func (h *heldAcks) add(done func(error)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.free || h.fail != nil {
		go done(h.fail)
		return
	}
	h.held = append(h.held, done)
	h.most = max(h.most, len(h.held))
	if len(h.held) == h.want {
		close(h.reached)
	}
}

func (h *heldAcks) release() {
	h.mu.Lock()
	held := h.held
	h.held, h.free = nil, true
	h.mu.Unlock()
	for _, done := range held {
		done(nil)
	}
}

func (h *heldAcks) mostHeld() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.most
}

type asyncAck struct {
	contract.Settler
	acks *heldAcks
}

func (a asyncAck) Ack(context.Context) error     { return nil }
func (a asyncAck) Release(context.Context) error { return nil } // rows a claim brings after the stop
func (a asyncAck) AckAsync(done func(error))     { a.acks.add(done) }

// runEndless runs an engine of the given workers over endless rows acked
// by acks, counting handlings into handled (and calling each, when set,
// with the count), until the test ends.
func runEndless(t *testing.T, workers int, acks *heldAcks, handled *atomic.Int64, each func(int64), unreachable func(error) bool, observe func(inboxtype.Event)) {
	clk := clock.Host{}
	e := New(Config{Name: "test", Table: "jobs", Workers: workers, MaxAttempts: 25, Lease: time.Minute, Timeout: time.Minute,
		Shutdown: 10 * time.Second, Poll: time.Hour, Conns: 4, Clock: clk, Log: slog.New(slog.DiscardHandler),
		Claimer: &endlessClaimer{acks: acks}, Wakes: make(chan struct{}), Counters: &Counters{}, Idle: NewIdle(clk),
		Callbacks: Callbacks{
			Handle: func(context.Context, *contract.Job) error {
				if n := handled.Add(1); each != nil {
					each(n)
				}
				return nil
			},
			Prepare: func(*contract.Job) {}, ErrorVerdict: func(error) (Verdict, time.Duration) { return Retry, 0 },
			Observe: observe, Unreachable: unreachable, DeadConn: unreachable}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Run(ctx); close(done) }()
	t.Cleanup(func() { acks.release(); cancel(); <-done })
}

// Acks handed to the form without a waiter may be ackRoom more than the
// workers (a process of few workers groups that many in an ack statement),
// and no more: with every ack unanswered, two workers hand over 10 and
// then wait, each with one more row handled.
func TestAcksInFlightBeyondTheWorkers(t *testing.T) {
	const workers = 2
	bound := workers + ackRoom(workers)
	acks := &heldAcks{reached: make(chan struct{}), want: bound}
	var handled atomic.Int64
	stalled := make(chan struct{})
	runEndless(t, workers, acks, &handled, func(n int64) {
		if n == int64(bound+workers) {
			close(stalled)
		}
	}, func(error) bool { return false }, func(inboxtype.Event) {})
	for _, c := range []chan struct{}{acks.reached, stalled} {
		select {
		case <-c:
		case <-time.After(30 * time.Second):
			t.Fatalf("within 30s: %d acks unanswered at most, %d rows handled; want %d and %d", acks.mostHeld(), handled.Load(), bound, bound+workers)
		}
	}
	if most := acks.mostHeld(); most != bound {
		t.Errorf("%d acks were unanswered at once with %d workers, want %d", most, workers, bound)
	}
}

// An ack the form answers with a dead connection is sent again (here it
// goes through) and gives its slot back: the subscription goes on past
// many times its slots, every row reported acked.
func TestAcksSentAgainGiveTheirSlotsBack(t *testing.T) {
	const workers = 2
	dead := errors.New("FATAL: terminating connection due to administrator command (SQLSTATE 57P01)")
	acks := &heldAcks{reached: make(chan struct{}), want: -1, fail: dead}
	var handled, acked atomic.Int64
	want := int64(20 * (workers + ackRoom(workers)))
	enough := make(chan struct{})
	runEndless(t, workers, acks, &handled, nil, func(err error) bool { return errors.Is(err, dead) }, func(ev inboxtype.Event) {
		if ev.Outcome == inboxtype.Acked && acked.Add(1) == want {
			close(enough)
		}
	})
	select {
	case <-enough:
	case <-time.After(30 * time.Second):
		t.Fatalf("within 30s: %d rows handled, %d reported acked; want %d acked", handled.Load(), acked.Load(), want)
	}
}

// againClaimer gives row 7 to its first claim, and to its second once
// again is closed (the row claimed again after its hold ended unseen, as
// when a connection is killed between two pings on MySQL); no rows after.
type againClaimer struct {
	contract.Claimer
	again  chan struct{}
	claims atomic.Int64
}

func (c *againClaimer) Traits() contract.Traits { return contract.Traits{} }
func (c *againClaimer) Held() int               { return 0 }
func (c *againClaimer) Claim(ctx context.Context, max int) ([]*contract.Job, error) {
	switch c.claims.Add(1) {
	case 1:
	case 2:
		select {
		case <-c.again:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	default:
		return nil, nil
	}
	return []*contract.Job{{ID: 7, Attempts: int(c.claims.Load()), Settler: ackStub{}}}, nil
}

// A row claimed again while its first handler runs, its hold's end not yet
// seen by the watch, tells that handler its hold is lost at once, and the
// second handling of the row starts only once the first returns: one
// process never runs two handlers of one id.
func TestRowClaimedAgainTellsTheRunningHandler(t *testing.T) {
	c := &againClaimer{again: make(chan struct{})}
	var (
		mu               sync.Mutex
		running, overlap int
		calls            int
	)
	first, release := make(chan struct{}), make(chan struct{})
	causes := make(chan error, 1)
	events := make(chan inboxtype.Event, 4)
	clk := clock.Host{}
	e := New(Config{Name: "test", Table: "jobs", Workers: 2, MaxAttempts: 25, Lease: time.Minute, Timeout: time.Minute,
		Shutdown: 10 * time.Second, Poll: 20 * time.Millisecond, Conns: 4, Clock: clk, Log: slog.New(slog.DiscardHandler),
		Claimer: c, Wakes: make(chan struct{}), Counters: &Counters{}, Idle: NewIdle(clk),
		Callbacks: Callbacks{
			Handle: func(ctx context.Context, j *contract.Job) error {
				mu.Lock()
				running++
				calls++
				n := calls
				if running > 1 {
					overlap++
				}
				mu.Unlock()
				defer func() { mu.Lock(); running--; mu.Unlock() }()
				if n == 1 {
					close(first)
					<-ctx.Done()
					causes <- context.Cause(ctx)
					<-release // runs on, ignoring its context
				}
				return nil
			},
			Prepare: func(*contract.Job) {}, ErrorVerdict: func(error) (Verdict, time.Duration) { return Retry, 0 },
			Observe: func(ev inboxtype.Event) { events <- ev }, Unreachable: func(error) bool { return false }, DeadConn: func(error) bool { return false }}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	within := func(ch <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(30 * time.Second):
			t.Fatalf("within 30s: %s", what)
		}
	}
	within(first, "the first handling started")
	close(c.again)
	select {
	case cause := <-causes:
		if !errors.Is(cause, inboxtype.ErrHoldLost) {
			t.Fatalf("the first handler's context ended with %v, want ErrHoldLost", cause)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("within 30s: the first handler was not told its row was claimed again")
	}
	mu.Lock()
	n := calls
	mu.Unlock()
	if n != 1 {
		t.Fatalf("%d handlings of row 7 started while the first runs on, want 1", n)
	}
	close(release)
	var outcomes []inboxtype.Outcome
	for len(outcomes) < 2 {
		select {
		case ev := <-events:
			outcomes = append(outcomes, ev.Outcome)
		case <-time.After(30 * time.Second):
			t.Fatalf("within 30s: outcomes %v, want the lost handling and the ack", outcomes)
		}
	}
	// Two outcomes, in either order: the second handling starts once the
	// first returns (overlap counts that), but the first's event may be
	// reported after the second's ack.
	if !slices.Contains(outcomes, inboxtype.Lost) || !slices.Contains(outcomes, inboxtype.Acked) {
		t.Errorf("outcomes %v, want the lost handling and the ack", outcomes)
	}
	mu.Lock()
	defer mu.Unlock()
	if overlap != 0 || calls != 2 {
		t.Errorf("%d overlaps and %d handlings of row 7, want none and 2", overlap, calls)
	}
}
