package engine

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/internal/claim/contract"
	"github.com/sqlinbox/sqlinbox/internal/inboxtype"
)

// failingClaimer fails its first claims, then gives one row a claim.
type failingClaimer struct {
	contract.Claimer
	mu     sync.Mutex
	fails  int
	claims []time.Time
	err    error
}

func (c *failingClaimer) Traits() contract.Traits { return contract.Traits{} }
func (c *failingClaimer) Held() int               { return 0 }
func (c *failingClaimer) Claim(ctx context.Context, max int) ([]*contract.Job, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.claims = append(c.claims, time.Now())
	if len(c.claims) <= c.fails {
		return nil, c.err
	}
	if len(c.claims) == c.fails+1 {
		return []*contract.Job{{ID: 1, Attempts: 1, Settler: ackStub{}}}, nil
	}
	return nil, nil
}

type ackStub struct{ contract.Settler }

func (ackStub) Ack(context.Context) error { return nil }

// runEngine runs an engine over c with a poll of an hour until the test
// ends, and returns its wakes and its events.
func runEngine(t *testing.T, c contract.Claimer, unreachable func(error) bool) (wakes chan struct{}, events chan inboxtype.Event) {
	return runEngineWith(t, c, unreachable, unreachable, 2, 4, slog.New(slog.DiscardHandler))
}

// runEngineWith is runEngine with its own dead-connection test, workers,
// connections and logger.
func runEngineWith(t *testing.T, c contract.Claimer, unreachable, deadConn func(error) bool, workers, conns int, log *slog.Logger) (wakes chan struct{}, events chan inboxtype.Event) {
	return runEngineWithPoll(t, c, unreachable, deadConn, workers, conns, time.Hour, log)
}

// runEngineWithPoll is runEngineWith with its own poll interval.
func runEngineWithPoll(t *testing.T, c contract.Claimer, unreachable, deadConn func(error) bool, workers, conns int, poll time.Duration, log *slog.Logger) (wakes chan struct{}, events chan inboxtype.Event) {
	wakes, events = make(chan struct{}, 1), make(chan inboxtype.Event, 64)
	clk := clock.Host{}
	e := New(Config{Name: "test", Table: "jobs", Workers: workers, MaxAttempts: 25, Lease: time.Minute, Timeout: time.Minute,
		Shutdown: time.Second, Poll: poll, Conns: conns, Clock: clk, Log: log, Claimer: c, Wakes: wakes,
		Counters: &Counters{}, Idle: NewIdle(clk), Callbacks: Callbacks{
			Handle: func(context.Context, *contract.Job) error { return nil }, Prepare: func(*contract.Job) {},
			ErrorVerdict: func(error) (Verdict, time.Duration) { return Retry, 0 },
			Observe:      func(ev inboxtype.Event) { events <- ev }, Unreachable: unreachable, DeadConn: deadConn}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return wakes, events
}

// Failed claims back off from 100 ms, doubling, not at the poll's pace (an
// hour here): the claim at the backoff's end finds the row, and it is
// handled. (A wake ends a backoff: TestWakeEndsTheBackoff.)
func TestFailedClaimsBackOffFrom100ms(t *testing.T) {
	c := &failingClaimer{fails: 2, err: errors.New("relation \"jobs\" does not exist")}
	_, events := runEngine(t, c, func(error) bool { return false })
	select {
	case ev := <-events:
		if ev.Outcome != inboxtype.Acked {
			t.Fatalf("event %+v, want the row acked", ev)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no row handled within 30s of two failed claims: the backoff follows the poll (an hour)")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	gaps := []time.Duration{c.claims[1].Sub(c.claims[0]), c.claims[2].Sub(c.claims[1])}
	t.Logf("gaps between claims after failures: %v", gaps)
	if gaps[0] < 100*time.Millisecond || gaps[1] < 200*time.Millisecond {
		t.Fatalf("claims after failures came %v apart, want at least 100ms then 200ms", gaps)
	}
}

// Claims that fail on dead connections are sent again at once (each takes
// another pooled connection), up to the connections the claims may hold:
// five failures in a row cost no backoff (with one they would cost 3.1 s).
func TestClaimOnADeadConnectionSentAgainAtOnce(t *testing.T) {
	dead := errors.New("FATAL: terminating connection due to administrator command (SQLSTATE 57P01)")
	c := &failingClaimer{fails: 5, err: dead}
	_, events := runEngine(t, c, func(err error) bool { return errors.Is(err, dead) })
	select {
	case <-events:
	case <-time.After(30 * time.Second):
		t.Fatal("no row handled within 30s of claims failed on dead connections")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	elapsed := c.claims[5].Sub(c.claims[0])
	t.Logf("five claims failed on dead connections; the sixth sent %v after the first", elapsed)
	if elapsed > 1500*time.Millisecond {
		t.Fatalf("the sixth claim came %v after the first: the failures backed off", elapsed)
	}
}

// farClaimer serves a backlog of rows in claims that each take trip, as a
// database across a network would, and records the rows each claim asked.
type farClaimer struct {
	contract.Claimer
	trip       time.Duration
	sideBySide bool
	mu         sync.Mutex
	left       int
	next       int64
	asks       []int
	// claims in flight now, and the most at once
	inflight, most int
}

func (c *farClaimer) Traits() contract.Traits {
	return contract.Traits{HoldExpires: true, ClaimLimit: 1000, ConcurrentWriters: true, SideBySide: c.sideBySide}
}
func (c *farClaimer) Held() int                { return 0 }
func (c *farClaimer) RoundTrip() time.Duration { return c.trip }
func (c *farClaimer) Claim(ctx context.Context, asked int) ([]*contract.Job, error) {
	c.mu.Lock()
	c.inflight++
	c.most = max(c.most, c.inflight)
	c.mu.Unlock()
	time.Sleep(c.trip) // the round trip
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inflight--
	c.asks = append(c.asks, asked)
	n := min(asked, c.left)
	c.left -= n
	jobs := make([]*contract.Job, n)
	for i := range jobs {
		c.next++
		jobs[i] = &contract.Job{ID: c.next, Attempts: 1, Lease: time.Now().Add(time.Minute), Settler: ackStub{}}
	}
	return jobs, nil
}

// Where a claim's round trip is long, claims under a backlog grow past the
// 100 rows of a near database (twice the rows the workers handle in a round
// trip, ten a worker at most), and the next one goes out while rows still
// wait: the drain takes fewer claims than 100 rows a claim would.
func TestFarClaimsGrowWithTheirRoundTrip(t *testing.T) {
	const rows, workers = 6000, 100
	c := &farClaimer{trip: 20 * time.Millisecond, left: rows}
	_, events := runEngineWith(t, c, func(error) bool { return false }, func(error) bool { return false }, workers, 4, slog.New(slog.DiscardHandler))
	start := time.Now()
	for i := range rows {
		select {
		case ev := <-events:
			if ev.Outcome != inboxtype.Acked {
				t.Fatalf("event %+v, want the row acked", ev)
			}
		case <-time.After(time.Minute):
			t.Fatalf("%d of %d rows handled within a minute", i, rows)
		}
	}
	took := time.Since(start)
	c.mu.Lock()
	defer c.mu.Unlock()
	most := 0
	for _, a := range c.asks {
		most = max(most, a)
	}
	t.Logf("%d rows in %v: %d claims of 20 ms, the largest asked %d rows", rows, took, len(c.asks), most)
	if most <= 100 || most > farFactor*workers {
		t.Fatalf("the largest claim asked %d rows, want more than 100 and at most %d", most, farFactor*workers)
	}
	if len(c.asks) >= rows/100 {
		t.Fatalf("%d claims for %d rows: no more rows a claim than 100", len(c.asks), rows)
	}
}

// Where the round trip is long and the form's claims may run side by side,
// a second claim goes out beside the one in flight under a backlog, never
// a third; a form whose claims may not gets one at a time. A second claim
// goes out only while the workers handle a claim's rows well within its
// round trip (claimMore): at 20 ms the race detector's slower handlers
// (about 9 ms a claim's rows) sat at that edge, and at 200 ms a CI run with
// every package under -race at once sent no second claim in 13, so the
// trip here is 500 ms.
func TestFarClaimsSideBySide(t *testing.T) {
	const rows, workers = 12000, 100
	for _, sideBySide := range []bool{false, true} {
		c := &farClaimer{trip: 500 * time.Millisecond, left: rows, sideBySide: sideBySide}
		_, events := runEngineWith(t, c, func(error) bool { return false }, func(error) bool { return false }, workers, 4, slog.New(slog.DiscardHandler))
		start := time.Now()
		for n := range rows {
			select {
			case ev := <-events:
				if ev.Outcome != inboxtype.Acked {
					t.Fatalf("event %+v, want the row acked", ev)
				}
			case <-time.After(time.Minute):
				t.Fatalf("side by side %v: %d of %d rows handled within a minute", sideBySide, n, rows)
			}
		}
		took := time.Since(start)
		c.mu.Lock()
		most, claims := c.most, len(c.asks)
		c.mu.Unlock()
		t.Logf("side by side %v: %d rows in %v, %d claims of 500 ms, at most %d in flight", sideBySide, rows, took, claims, most)
		want := 1
		if sideBySide {
			want = farClaims
		}
		if most != want {
			t.Errorf("side by side %v: at most %d claims in flight, want %d", sideBySide, most, want)
		}
	}
}
