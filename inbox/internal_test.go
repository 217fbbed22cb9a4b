package inbox

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/claim/lease"
	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/internal/claim"
	"github.com/sqlinbox/sqlinbox/internal/testdb"
	"github.com/sqlinbox/sqlinbox/migrations"
)

type row struct {
	ID          int64      `db:"id" inbox:"id,generated"`
	LockedUntil *time.Time `db:"locked_until" inbox:"locked_until"`
	Payload     []byte     `db:"payload" inbox:"payload"`
	Attempts    int        `db:"attempts" inbox:"attempts"`
}

func eachURL(t *testing.T, f func(t *testing.T, url string)) {
	t.Run("sqlite", func(t *testing.T) { t.Parallel(); f(t, testdb.SQLite(t)) })
	t.Run("postgres", func(t *testing.T) { t.Parallel(); f(t, testdb.Postgres(t)) })
}

// claimer opens a broker of its own (a pool of its own, as another instance
// would) and checks the table.
func claimerOn(t *testing.T, url string, clk clock.Clock) (*Broker, *Subscription) {
	t.Helper()
	b, err := Open(url, WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	ctx := context.Background()
	if err := migrations.Apply(ctx, b.DB(), "jobs"); err != nil {
		t.Fatal(err)
	}
	sub, err := Subscribe(b, MustQueue[row]("jobs"), func(context.Context, row) error { return nil }, Lease(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.check(ctx); err != nil {
		t.Fatal(err)
	}
	return b, sub
}

// An ack after the lease was taken over changes nothing; the new holder's
// ack deletes the row.
func TestFencing(t *testing.T) {
	eachURL(t, func(t *testing.T, url string) {
		ctx := context.Background()
		clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		b, first := claimerOn(t, url, clk)
		_, second := claimerOn(t, url, clk)
		if _, err := b.DB().Exec("INSERT INTO jobs (payload) VALUES ('x')"); err != nil {
			t.Fatal(err)
		}
		old, err := first.claimer.Claim(ctx, 5)
		if err != nil || len(old) != 1 {
			t.Fatalf("first claim = %d rows, %v", len(old), err)
		}
		if got, err := second.claimer.Claim(ctx, 5); err != nil || len(got) != 0 {
			t.Fatalf("a leased row was claimed again before its lease ran out: %d rows, %v", len(got), err)
		}
		clk.Advance(11 * time.Second)
		taken, err := second.claimer.Claim(ctx, 5)
		if err != nil || len(taken) != 1 {
			t.Fatalf("second claim after the lease = %d rows, %v", len(taken), err)
		}
		for name, settle := range map[string]func(context.Context) error{
			"ack":    old[0].Ack,
			"retry":  func(ctx context.Context) error { return old[0].Retry(ctx, time.Hour, "late") },
			"extend": func(ctx context.Context) error { return old[0].Extend(ctx, time.Hour) },
		} {
			if err := settle(ctx); !errors.Is(err, claim.ErrLost) {
				t.Fatalf("%s by the old holder = %v, want ErrLost", name, err)
			}
		}
		var n int
		if err := b.DB().QueryRow("SELECT count(*) FROM jobs").Scan(&n); err != nil || n != 1 {
			t.Fatalf("rows after the old holder's ack = %d, %v; want the row still there", n, err)
		}
		if err := taken[0].Ack(ctx); err != nil {
			t.Fatalf("new holder's ack: %v", err)
		}
		if err := b.DB().QueryRow("SELECT count(*) FROM jobs").Scan(&n); err != nil || n != 0 {
			t.Fatalf("rows after the new holder's ack = %d, %v", n, err)
		}
	})
}

// blockingForm hands out rows only when the test lets it, so a claim can be
// in flight when the subscription is told to stop.
type blockingForm struct {
	claim.Form
	entered chan struct{}
	release chan struct{}
}

func (f blockingForm) New(env claim.Env) (claim.Claimer, error) {
	c, err := f.Form.New(env)
	return blockingClaimer{c, f}, err
}

type blockingClaimer struct {
	claim.Claimer
	f blockingForm
}

func (c blockingClaimer) Claim(ctx context.Context, max int) ([]*claim.Job, error) {
	jobs, err := c.Claimer.Claim(ctx, max)
	c.f.entered <- struct{}{}
	<-c.f.release
	return jobs, err
}

// Rows claimed but not started when the subscription stops are given back:
// nothing waits out a lease after a clean stop.
func TestShutdownGivesBackUnstartedRows(t *testing.T) {
	eachURL(t, func(t *testing.T, url string) {
		b, err := Open(url)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if err := migrations.Apply(context.Background(), b.DB(), "jobs"); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if _, err := b.DB().Exec("INSERT INTO jobs (payload) VALUES ('x')"); err != nil {
				t.Fatal(err)
			}
		}
		form := blockingForm{Form: lease.Form, entered: make(chan struct{}, 1), release: make(chan struct{})}
		handled := make(chan int64, 3)
		sub, err := Subscribe(b, MustQueue[row]("jobs"), func(ctx context.Context, r row) error {
			handled <- r.ID
			return nil
		}, Workers(3), Form(form))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- sub.Run(ctx) }()
		<-form.entered // the claim has leased all three rows
		cancel()
		close(form.release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if len(handled) != 0 {
			t.Fatalf("%d rows were started after the stop", len(handled))
		}
		var leased, total int
		if err := b.DB().QueryRow("SELECT count(*), count(locked_until) FROM jobs").Scan(&total, &leased); err != nil {
			t.Fatal(err)
		}
		if total != 3 || leased != 0 {
			t.Fatalf("after stop: %d rows, %d still leased; want 3 rows, none leased", total, leased)
		}
		if got := sub.Stats().Released; got != 3 {
			t.Fatalf("Released = %d, want 3", got)
		}
	})
}

// A broker that polls more often than RegistryHeartbeat's bound does not
// lend Register a heartbeat below it: the default is floored, as the
// option refuses such a value.
func TestRegistryHeartbeatDefaultKeepsItsBound(t *testing.T) {
	for _, tc := range []struct{ poll, want time.Duration }{
		{time.Millisecond, minHeartbeat},
		{time.Second, time.Second},
	} {
		b, err := Open(testdb.SQLite(t), PollInterval(tc.poll))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		svc := NewService("svc", "1", b)
		if err := svc.Register(); err != nil {
			t.Fatal(err)
		}
		if got := svc.reg.cfg.heartbeat; got != tc.want {
			t.Errorf("poll %v: heartbeat %v, want %v", tc.poll, got, tc.want)
		}
	}
}
