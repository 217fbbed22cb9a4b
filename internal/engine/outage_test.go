package engine

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/claim/contract"
)

// outageClaimer is a row-lock-like form (a row a claim, claims side by
// side) whose claims fail until up is closed, then find one row each.
type outageClaimer struct {
	contract.Claimer
	up      chan struct{}
	mu      sync.Mutex
	failed  int
	firstOK time.Time
	rows    int
}

func (c *outageClaimer) Traits() contract.Traits {
	return contract.Traits{RowsPerClaim: 1, ConcurrentWriters: true}
}
func (c *outageClaimer) Held() int { return 0 }
func (c *outageClaimer) Claim(ctx context.Context, max int) ([]*contract.Job, error) {
	time.Sleep(2 * time.Millisecond) // a statement's round trip: the claims overlap
	select {
	case <-c.up:
	default:
		c.mu.Lock()
		c.failed++
		c.mu.Unlock()
		return nil, errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.firstOK.IsZero() {
		c.firstOK = time.Now()
	}
	if c.rows < 8 {
		c.rows++
		return []*contract.Job{{ID: int64(c.rows), Attempts: 1, Settler: ackStub{}}}, nil
	}
	return nil, nil
}

// An outage (connections refused: no dead connection to replace) fails
// the 8 claims in flight at once: that is one failure for
// the backoff, not eight, so after a 1.5 s outage claims resume within
// the backoff's step then (100+200+400+800 ms), not at its 30 s cap.
func TestOneOutageStepsTheBackoffOnce(t *testing.T) {
	c := &outageClaimer{up: make(chan struct{})}
	_, events := runEngineWith(t, c, func(error) bool { return true }, func(error) bool { return false }, 8, 8, slog.New(slog.DiscardHandler))
	time.AfterFunc(1500*time.Millisecond, func() { close(c.up) })
	<-time.After(1500 * time.Millisecond)
	back := time.Now()
	for i := 0; i < 8; i++ {
		select {
		case <-events:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of 8 rows handled within 10s of the database coming back: the backoff counted one failure per claim", i)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	resume := c.firstOK.Sub(back)
	t.Logf("8 workers, a 1.5 s outage: %d claims failed; the first claim succeeded %v after the database came back", c.failed, resume)
	if resume > 4*time.Second {
		t.Fatalf("the first claim succeeded %v after the database came back, want within 4s", resume)
	}
}

// A long outage (a failover: the database out of reach for 6.5 s) steps
// the backoff no further than the poll interval (200 ms here): claims
// resume within about a poll of the database coming back, not at the
// doubled step then (100 ms doubling reaches 6.4 s, 5.8 s after the
// database is back).
func TestLongOutageRetriedEveryPoll(t *testing.T) {
	c := &outageClaimer{up: make(chan struct{})}
	_, events := runEngineWithPoll(t, c, func(error) bool { return true }, func(error) bool { return false }, 8, 8, 200*time.Millisecond, slog.New(slog.DiscardHandler))
	<-time.After(6500 * time.Millisecond)
	back := time.Now()
	close(c.up)
	// Every row handled: none is left claimed when the engine stops.
	for i := 0; i < 8; i++ {
		select {
		case <-events:
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of 8 rows handled within 30s of the database coming back", i)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	resume := c.firstOK.Sub(back)
	t.Logf("poll 200 ms, a 6.5 s outage: %d claims failed; the first claim succeeded %v after the database came back", c.failed, resume)
	if resume > 3*time.Second {
		t.Fatalf("the first claim succeeded %v after the database came back, want within about the 200 ms poll (fails past 3s)", resume)
	}
}

// notedLog signals each error record's message.
type notedLog struct {
	slog.Handler
	errs chan string
}

func (h notedLog) Enabled(context.Context, slog.Level) bool { return true }
func (h notedLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h notedLog) WithGroup(string) slog.Handler            { return h }
func (h notedLog) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		h.errs <- r.Message
	}
	return nil
}

// A wake during a failure's backoff (a notification came: the database
// answers) ends the backoff: the claim goes out at once, not at its end.
func TestWakeEndsTheBackoff(t *testing.T) {
	c := &failingClaimer{fails: 5, err: errors.New("relation \"jobs\" does not exist")}
	log := notedLog{Handler: slog.DiscardHandler, errs: make(chan string, 16)}
	wakes, events := runEngineWith(t, c, func(error) bool { return false }, func(error) bool { return false }, 2, 4, slog.New(log))
	for i := 0; i < 5; i++ {
		select {
		case msg := <-log.errs:
			if !strings.Contains(msg, "claim failed") {
				t.Fatalf("logged %q, want a failed claim", msg)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d failed claims logged within 10s, want 5", i)
		}
	}
	// The loop is in the fifth failure's handling: the wake is read after
	// its backoff (1.6 s) began.
	woke := time.Now()
	wakes <- struct{}{}
	select {
	case <-events:
	case <-time.After(10 * time.Second):
		t.Fatal("no row handled within 10s of a wake during a backoff")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	after := c.claims[5].Sub(woke)
	t.Logf("a wake 1.6 s backoff in: the next claim came %v after it", after)
	if after > 800*time.Millisecond {
		t.Fatalf("the claim after a wake came %v after it: the wake waited for the backoff (1.6s)", after)
	}
}

// blockedAck is a row whose ack waits for release.
type blockedAck struct {
	contract.Settler
	release chan struct{}
}

func (a blockedAck) Ack(context.Context) error { <-a.release; return nil }

// settleClaimer gives one row whose ack waits, then fails its claims.
type settleClaimer struct {
	failingClaimer
	row *contract.Job
}

func (c *settleClaimer) Claim(ctx context.Context, max int) ([]*contract.Job, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.claims = append(c.claims, time.Now())
	switch n := len(c.claims); {
	case n == 1:
		return []*contract.Job{c.row}, nil
	case n <= 6:
		return nil, c.err
	}
	return nil, nil
}

// A settlement that succeeds during a failure's backoff says the database
// answers again: the backoff ends and the next claim goes out at once.
func TestSettlementEndsTheBackoff(t *testing.T) {
	release := make(chan struct{})
	c := &settleClaimer{failingClaimer: failingClaimer{err: errors.New("relation \"jobs\" does not exist")},
		row: &contract.Job{ID: 1, Attempts: 1, Settler: blockedAck{release: release}}}
	log := notedLog{Handler: slog.DiscardHandler, errs: make(chan string, 16)}
	wakes, events := runEngineWith(t, c, func(error) bool { return false }, func(error) bool { return false }, 2, 4, slog.New(log))
	wakes <- struct{}{} // the row's claim came back short: a wake claims again
	for i := 0; i < 5; i++ {
		select {
		case <-log.errs:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d failed claims logged within 10s, want 5", i)
		}
	}
	// The fifth failure's backoff (1.6 s) is under way; the ack succeeds.
	acked := time.Now()
	close(release)
	select {
	case <-events:
	case <-time.After(10 * time.Second):
		t.Fatal("the row was not acked within 10s")
	}
	for i := 0; ; i++ {
		c.mu.Lock()
		n := len(c.claims)
		c.mu.Unlock()
		if n >= 7 {
			break
		}
		select {
		case <-log.errs: // the sixth claim failed: wait for the seventh
		case <-time.After(10 * time.Millisecond):
		}
		if i > 1000 {
			t.Fatal("no claim after the ack within 10s")
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	after := c.claims[6].Sub(acked)
	t.Logf("an ack 1.6 s into a backoff: the next claim came %v after it", after)
	if after > 800*time.Millisecond {
		t.Fatalf("the claim after a successful ack came %v after it: the backoff (1.6s) ran on", after)
	}
}
