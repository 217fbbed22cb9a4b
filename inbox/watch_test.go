package inbox

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/claim"
	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/internal/testdb"
)

// extendStub is a settler whose extensions fail, each call told on calls.
type extendStub struct {
	claim.Settler
	calls chan time.Duration
}

func (s extendStub) Extend(_ context.Context, lease time.Duration) error {
	s.calls <- lease
	return errors.New("database unreachable")
}

// watched runs one leased job through work on a fake clock, with a handler
// that reports its context's cause and returns only when told. It returns
// the handler's causes, the release of the handler, and work's result.
func watched(t *testing.T, clk *clock.Fake, opts ...SubOption) (extends chan time.Duration, causes chan error, release chan struct{}, result chan handling) {
	t.Helper()
	b, err := Open(testdb.SQLite(t), WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	causes, release = make(chan error, 1), make(chan struct{})
	s, err := Subscribe(b, MustQueue[row]("jobs"), func(ctx context.Context, _ row) error {
		<-ctx.Done()
		causes <- context.Cause(ctx)
		<-release
		return ctx.Err()
	}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	extends, result = make(chan time.Duration, 8), make(chan handling, 1)
	j := &claim.Job{ID: 7, Lease: clk.Now().Add(s.cfg.lease), Value: &row{}, Settler: extendStub{calls: extends}}
	go func() { result <- s.work(context.Background(), b.log, j, clk.Now()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := clk.WaitTimers(ctx, 1); err != nil { // the handling's one timer
		t.Fatal(err)
	}
	return extends, causes, release, result
}

// waitNext waits until the fake clock's earliest timer is due at at: the
// handling has armed its timer for that time.
func waitNext(t *testing.T, clk *clock.Fake, at time.Time, what string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		next, ok := clk.Next()
		if ok && next.Equal(at) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the next timer is due at %v (armed: %v), want %v", what, next, ok, at)
		}
		time.Sleep(time.Millisecond)
	}
}

// A lease whose extensions keep failing runs out: the handler is told at
// once (ErrLeaseLost), and the handling is reported lost.
func TestLeaseRunsOutWhileExtensionsFail(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	extends, causes, release, result := watched(t, clk, Lease(9*time.Second))
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
	select {
	case err := <-causes:
		if !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("handler's context ended with %v, want ErrLeaseLost", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the lease ran out and the handler was not told")
	}
	close(release)
	if h := <-result; !h.lost {
		t.Fatal("a handling whose lease ran out is not reported lost")
	}
}

// At the timeout the handler's context ends with ErrTimeout and its lease
// is extended no more, even while the handler runs on.
func TestTimeoutEndsExtensions(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	extends, causes, release, result := watched(t, clk, Lease(9*time.Second), Timeout(5*time.Second))
	clk.Advance(5 * time.Second)
	if err := <-causes; !errors.Is(err, ErrTimeout) {
		t.Fatalf("handler's context ended with %v, want ErrTimeout", err)
	}
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
	if !errors.Is(h.err, ErrTimeout) || h.lost {
		t.Fatalf("handling ended with err %v, lost %v; want ErrTimeout, not lost", h.err, h.lost)
	}
}
