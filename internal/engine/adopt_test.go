package engine

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/internal/claim/contract"
)

// adoptClaimer's first claim takes row 1; later claims find nothing. It
// counts the jobs Adopted counted in work, and the rows given back.
type adoptClaimer struct {
	contract.Claimer
	claimed  atomic.Bool
	adopted  atomic.Int64
	released chan int64
}

func (c *adoptClaimer) Traits() contract.Traits { return contract.Traits{} }
func (c *adoptClaimer) Held() int               { return 0 }
func (c *adoptClaimer) Claim(context.Context, int) ([]*contract.Job, error) {
	if c.claimed.Swap(true) {
		return nil, nil
	}
	return []*contract.Job{c.job(1)}, nil
}
func (c *adoptClaimer) Adopt(func(...any) error) (*contract.Job, error) { return nil, nil }
func (c *adoptClaimer) Adopted(jobs []*contract.Job)                    { c.adopted.Add(int64(len(jobs))) }

func (c *adoptClaimer) job(id int64) *contract.Job {
	return &contract.Job{ID: id, Attempts: 1, Settler: releaseRecorder{id: id, released: c.released}}
}

type releaseRecorder struct {
	contract.Settler
	id       int64
	released chan int64
}

func (r releaseRecorder) Ack(context.Context) error     { return nil }
func (r releaseRecorder) Release(context.Context) error { r.released <- r.id; return nil }

func adoptEngine(c *adoptClaimer, handle func(context.Context, *contract.Job) error, mw ...ClaimMiddleware) *Engine {
	clk := clock.Host{}
	return New(Config{Name: "test", Table: "jobs", Workers: 2, MaxAttempts: 25, Lease: time.Minute, Timeout: time.Minute,
		Shutdown: 10 * time.Second, Poll: time.Hour, Conns: 4, Clock: clk, Log: slog.New(slog.DiscardHandler),
		Claimer: c, Wakes: make(chan struct{}), Counters: &Counters{}, Idle: NewIdle(clk), ClaimMiddleware: mw,
		Callbacks: Callbacks{Handle: handle, Prepare: func(*contract.Job) {}, ErrorVerdict: func(error) (Verdict, time.Duration) { return Retry, 0 }}})
}

// A job a handler adopts runs next, counted claimed and in work, with no
// claim; adopted where the engine does not run, or where the claim
// middleware takes nothing (a paused queue), it is given back.
func TestAdopt(t *testing.T) {
	c := &adoptClaimer{released: make(chan int64, 4)}
	ran := make(chan int64, 4)
	var e *Engine
	e = adoptEngine(c, func(ctx context.Context, j *contract.Job) error {
		ran <- j.ID
		if j.ID == 1 {
			e.Adopt(ctx, []*contract.Job{c.job(2)})
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Run(ctx); close(done) }()
	for want := int64(1); want <= 2; want++ {
		select {
		case id := <-ran:
			if id != want {
				t.Fatalf("handled row %d, want %d", id, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("row %d was not handled", want)
		}
	}
	cancel()
	<-done
	if st := e.stats.Read(); st.Claimed != 2 || st.Acked != 2 || st.Released != 0 || c.adopted.Load() != 1 {
		t.Fatalf("claimed %d, acked %d, released %d, adopted %d; want 2, 2, 0, 1", st.Claimed, st.Acked, st.Released, c.adopted.Load())
	}

	e.Adopt(context.Background(), []*contract.Job{c.job(3)}) // the engine has stopped
	paused := adoptEngine(c, nil, func(context.Context, int, ClaimFunc) ([]*contract.Job, error) { return nil, nil })
	paused.Adopt(context.Background(), []*contract.Job{c.job(4)})
	for _, want := range []int64{3, 4} {
		if got := <-c.released; got != want {
			t.Fatalf("gave back row %d, want %d", got, want)
		}
	}
	if c.adopted.Load() != 3 {
		t.Fatalf("adopted %d in work, want 3 (each given back is counted in first)", c.adopted.Load())
	}
}
