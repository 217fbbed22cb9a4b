package inbox_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
)

// Park sets the row aside at its first attempt, with its error kept; the
// outcome is a type middleware can errors.As.
func TestHandlerParks(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		b := open(t, url, inbox.WithClock(fake()))
		insert(t, b.DB(), 1)
		q := inbox.MustQueue[Job]("jobs")
		ev := inboxtest.NewEvents(t)
		sub, err := inbox.Subscribe(b, q, func(ctx context.Context, j Job) error {
			return inbox.Park(errors.New("invoice for a closed account"))
		}, inbox.MaxAttempts(5), ev.Observe())
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
		evs := ev.Wait("the park", func(e []inbox.Event) bool { return len(e) == 1 })
		var pe *inbox.ParkError
		if evs[0].Outcome != inbox.Parked || !errors.As(evs[0].Err, &pe) {
			t.Fatalf("event %+v, want Parked with a *ParkError", evs[0])
		}
		parked, err := inbox.ListParked(context.Background(), b, q)
		if err != nil || len(parked) != 1 {
			t.Fatalf("parked = %+v, %v; want the row", parked, err)
		}
		if parked[0].Attempts != 1 || !strings.Contains(parked[0].LastError.String, "closed account") {
			t.Fatalf("parked row: attempts %d, last error %q", parked[0].Attempts, parked[0].LastError.String)
		}
		if s := sub.Stats(); s.Parked != 1 || s.Retried != 0 {
			t.Fatalf("stats %+v, want one parked and no retry", s)
		}
	})
}

// Snooze brings the row back after the delay without using an attempt:
// snoozed more often than MaxAttempts, it is still handled, and its
// attempts column reads as before.
func TestHandlerSnoozes(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		clk := fake()
		b := open(t, url, inbox.WithClock(clk))
		insert(t, b.DB(), 1)
		ev := inboxtest.NewEvents(t)
		var calls atomic.Int32
		sub, err := inbox.Subscribe(b, inbox.MustQueue[Job]("jobs"), func(ctx context.Context, j Job) error {
			if calls.Add(1) <= 3 {
				return inbox.Snooze(time.Hour)
			}
			return nil
		}, inbox.MaxAttempts(2), ev.Observe())
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
		for n := 1; n <= 3; n++ {
			evs := ev.Wait("a snooze", func(e []inbox.Event) bool { return len(e) == n })
			var se *inbox.SnoozeError
			if got := evs[n-1]; got.Outcome != inbox.Snoozed || !errors.As(got.Err, &se) || se.Delay != time.Hour {
				t.Fatalf("event %+v, want Snoozed with a *SnoozeError of an hour", got)
			}
			var attempts int
			if err := b.DB().QueryRow("SELECT attempts FROM jobs").Scan(&attempts); err != nil {
				t.Fatal(err)
			}
			if attempts != 0 {
				t.Fatalf("attempts = %d after %d snoozes, want 0", attempts, n)
			}
			inboxtest.Idle(t, sub)
			clk.Advance(59 * time.Minute)
			inboxtest.Idle(t, sub)
			if calls.Load() != int32(n) {
				t.Fatal("handled again before the snooze ended")
			}
			clk.Advance(2 * time.Minute)
		}
		ev.Wait("the ack", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Acked) == 1 })
		if s := sub.Stats(); s.Snoozed != 3 || s.Acked != 1 {
			t.Fatalf("stats %+v, want 3 snoozed, 1 acked", s)
		}
	})
}

// The default backoff spreads rows that failed together over the last
// quarter of one second doubled per failure, the same on every run.
func TestDefaultBackoffHasJitter(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		clk := fake()
		b := open(t, url, inbox.WithClock(clk))
		insert(t, b.DB(), 20)
		ev := inboxtest.NewEvents(t)
		sub, err := inbox.Subscribe(b, inbox.MustQueue[Job]("jobs"), func(ctx context.Context, j Job) error {
			return errors.New("down")
		}, inbox.Workers(20), ev.Observe())
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
		ev.Wait("20 retries", func(e []inbox.Event) bool { return len(e) == 20 })
		seen := map[time.Time]bool{}
		for _, r := range inboxtest.Rows(t, b, inbox.MustQueue[Job]("jobs")) {
			d := r.LockedUntil.Sub(clk.Now())
			if d < 750*time.Millisecond || d > time.Second {
				t.Fatalf("row %d retried after %v, want within [750ms, 1s]", r.ID, d)
			}
			seen[r.LockedUntil] = true
		}
		if len(seen) < 10 {
			t.Fatalf("20 rows that failed together retry at %d instants: no jitter", len(seen))
		}
	})
}

// A handler that returns its context's own error at the timeout gets the
// timeout once in its error, not twice.
func TestTimeoutErrorSaidOnce(t *testing.T) {
	clk := fake()
	b := open(t, inboxtest.SQLite(t), inbox.WithClock(clk))
	insert(t, b.DB(), 2)
	ev := inboxtest.NewEvents(t)
	running := make(chan struct{}, 2)
	var calls atomic.Int32
	sub, err := inbox.Subscribe(b, inbox.MustQueue[Job]("jobs"), func(ctx context.Context, j Job) error {
		running <- struct{}{}
		<-ctx.Done()
		if calls.Add(1) == 1 {
			return context.Cause(ctx)
		}
		return ctx.Err()
	}, inbox.Timeout(time.Second), inbox.Workers(2), ev.Observe())
	if err != nil {
		t.Fatal(err)
	}
	inboxtest.RunSubscription(t, sub)
	receiveN(t, running, 2, "handlers started")
	clk.Advance(time.Second)
	evs := ev.Wait("both timed out", func(e []inbox.Event) bool { return len(e) == 2 })
	for _, e := range evs {
		if !errors.Is(e.Err, inbox.ErrTimeout) {
			t.Fatalf("event %+v, want ErrTimeout", e)
		}
		if msg := e.Err.Error(); strings.Count(msg, "timed out") != 1 {
			t.Fatalf("error text %q says the timeout more than once", msg)
		}
	}
}

// A settlement that fails is reported with its error and counted.
func TestFailedSettlementReported(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		b := open(t, url)
		insert(t, b.DB(), 1)
		ev := inboxtest.NewEvents(t)
		sub, err := inbox.Subscribe(b, inbox.MustQueue[Job]("jobs"), func(ctx context.Context, j Job) error {
			// The ack that follows finds no table.
			_, err := b.DB().ExecContext(ctx, "ALTER TABLE jobs RENAME TO jobs_gone")
			return err
		}, ev.Observe())
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
		evs := ev.Wait("the failed ack", func(e []inbox.Event) bool { return len(e) == 1 })
		if evs[0].Outcome != inbox.Failed || evs[0].Err == nil || !strings.Contains(evs[0].Err.Error(), "ack") {
			t.Fatalf("event %+v, want Failed carrying the ack's error", evs[0])
		}
		if s := sub.Stats(); s.Failed != 1 || s.Acked != 0 {
			t.Fatalf("stats %+v, want one failed settlement", s)
		}
	})
}
