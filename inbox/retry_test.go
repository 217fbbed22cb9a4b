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

// A handler that always fails is retried with backoff, then parked with its
// error kept; a panic counts as a failure carrying the panic's text.
func TestRetryBackoffAndParking(t *testing.T) {
	for _, mode := range []string{"error", "panic"} {
		t.Run(mode, func(t *testing.T) {
			eachDB(t, func(t *testing.T, url string) {
				clk := fake()
				b := open(t, url, inbox.WithClock(clk), inbox.PollInterval(time.Second))
				insert(t, b.DB(), 1)
				q := inbox.MustQueue[Job]("jobs")
				ev := inboxtest.NewEvents(t)
				var calls atomic.Int32
				sub, err := inbox.Subscribe(b, q, func(ctx context.Context, j Job) error {
					// The claim counts the attempt: the handler sees its own.
					if n := int(calls.Add(1)); n <= 3 && n != j.Attempts {
						t.Errorf("call %d saw attempts=%d", calls.Load(), j.Attempts)
					}
					if mode == "panic" {
						panic("renderer exploded")
					}
					return errors.New("renderer failed")
				}, inbox.MaxAttempts(3), ev.Observe())
				if err != nil {
					t.Fatal(err)
				}
				inboxtest.RunSubscription(t, sub)
				for attempt := 1; attempt <= 2; attempt++ {
					evs := ev.Wait("a retry", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Retried) >= attempt })
					if got := evs[len(evs)-1].Attempt; got != attempt {
						t.Fatalf("retry event for attempt %d, want %d", got, attempt)
					}
					// Not before the backoff: one second, then two, each
					// with jitter of a quarter either way.
					backoff := time.Second << (attempt - 1)
					var attempts int
					if err := b.DB().QueryRow("SELECT attempts FROM jobs").Scan(&attempts); err != nil {
						t.Fatal(err)
					}
					if attempts != attempt {
						t.Fatalf("attempts column = %d after %d failures", attempts, attempt)
					}
					inboxtest.Idle(t, sub)
					clk.Advance(backoff / 2)
					if calls.Load() != int32(attempt) {
						t.Fatalf("handled again before the backoff of %v passed", backoff)
					}
					inboxtest.Idle(t, sub)
					clk.Advance(backoff)
				}
				ev.Wait("the row parked", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Parked) == 1 })
				parked, err := inbox.ListParked(context.Background(), b, q)
				if err != nil {
					t.Fatal(err)
				}
				if len(parked) != 1 || parked[0].Attempts != 3 {
					t.Fatalf("parked rows = %+v, want one with attempts=3", parked)
				}
				want := "renderer failed"
				if mode == "panic" {
					want = "panic: renderer exploded"
				}
				if !strings.Contains(parked[0].LastError.String, want) {
					t.Fatalf("last_error = %q, want it to hold %q", parked[0].LastError.String, want)
				}
				// Parked rows are never claimed again, however far time moves.
				inboxtest.Idle(t, sub)
				clk.Advance(24 * time.Hour)
				inboxtest.Idle(t, sub)
				if n := calls.Load(); n != 3 {
					t.Fatalf("handled %d times, want 3", n)
				}
				// Unparked, it is handled again at once.
				if n, err := inbox.Unpark(context.Background(), b, q, parked[0].ID); err != nil || n != 1 {
					t.Fatalf("Unpark = %d, %v", n, err)
				}
				ev.Wait("a handling after unpark", func(e []inbox.Event) bool { return len(e) >= 4 })
			})
		})
	}
}

// RetryAfter picks the delay, without an error it stores none.
func TestRetryAfter(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		clk := fake()
		b := open(t, url, inbox.WithClock(clk))
		insert(t, b.DB(), 1)
		ev := inboxtest.NewEvents(t)
		var calls atomic.Int32
		sub, err := inbox.Subscribe(b, inbox.MustQueue[Job]("jobs"), func(ctx context.Context, j Job) error {
			if calls.Add(1) == 1 {
				return inbox.RetryAfter(time.Hour, errors.New("not yet"))
			}
			return nil
		}, ev.Observe())
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
		ev.Wait("the retry", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Retried) == 1 })
		inboxtest.Idle(t, sub)
		clk.Advance(59 * time.Minute)
		inboxtest.Idle(t, sub)
		if calls.Load() != 1 {
			t.Fatal("handled again before the hour asked for")
		}
		clk.Advance(2 * time.Minute)
		ev.Wait("the ack", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Acked) == 1 })
	})
}

// Count tells available, held and parked rows apart.
func TestCount(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		clk := fake()
		b := open(t, url, inbox.WithClock(clk))
		q := inbox.MustQueue[Job]("jobs")
		ctx := context.Background()
		for _, d := range []time.Duration{0, 0, time.Hour} {
			if _, err := inbox.Publish(ctx, b, q, Job{Payload: []byte("x")}, inbox.Delay(d)); err != nil {
				t.Fatal(err)
			}
		}
		// Parked as the library parks: locked_until at 9999-12-31 UTC.
		parked := "UPDATE jobs SET locked_until = '9999-12-31 00:00:00.000+00:00' WHERE id = 1"
		if b.Dialect() == "mysql" { // DATETIME(6) holds no zone: it is UTC
			parked = "UPDATE jobs SET locked_until = '9999-12-31 00:00:00' WHERE id = 1"
		}
		if _, err := b.DB().Exec(parked); err != nil {
			t.Fatal(err)
		}
		c, err := inbox.Count(ctx, b, q)
		if err != nil {
			t.Fatal(err)
		}
		if c != (inbox.Counts{Available: 1, Held: 1, Parked: 1}) {
			t.Fatalf("counts = %+v, want one of each", c)
		}
		clk.Advance(2 * time.Hour)
		if c, err = inbox.Count(ctx, b, q); err != nil || c.Available != 2 {
			t.Fatalf("after the delay: %+v, %v", c, err)
		}
	})
}
