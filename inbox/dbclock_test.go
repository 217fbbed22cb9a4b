package inbox_test

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/claim/rowlock"
	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
)

// With the database clock, a host whose clock runs an hour ahead still
// never takes a row another instance holds under a lease; with its own
// clock it does (the control), which is what the database clock is for.
func TestDatabaseClockIgnoresHostSkew(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		for _, tc := range []struct {
			name     string
			database bool
		}{{"database clock", true}, {"skewed host clock (control)", false}} {
			t.Run(tc.name, func(t *testing.T) {
				holder := open(t, url, inbox.WithClock(clock.Database{}))
				if _, err := holder.DB().Exec("DELETE FROM jobs"); err != nil {
					t.Fatal(err)
				}
				insert(t, holder.DB(), 1)
				ahead := clock.NewFake(time.Now().Add(time.Hour))
				var skewed clock.Clock = ahead
				if tc.database {
					skewed = clock.Database{Clock: ahead}
				}
				other := open(t, url, inbox.WithClock(skewed), inbox.PollInterval(time.Second))

				started, finish := make(chan struct{}), make(chan struct{})
				held, err := inbox.Subscribe(holder, inbox.MustQueue[Job]("jobs"), func(ctx context.Context, j Job) error {
					close(started)
					<-finish
					return nil
				}, inbox.Lease(time.Minute))
				if err != nil {
					t.Fatal(err)
				}
				stopHolder := inboxtest.RunSubscription(t, held)
				<-started
				defer func() { close(finish); stopHolder() }()

				ev := inboxtest.NewEvents(t)
				thief, err := inbox.Subscribe(other, inbox.MustQueue[Job]("jobs"), func(context.Context, Job) error { return nil },
					ev.Observe())
				if err != nil {
					t.Fatal(err)
				}
				inboxtest.RunSubscription(t, thief)
				if !tc.database {
					ev.Wait("the skewed host to take the row (control)", func(e []inbox.Event) bool { return len(e) == 1 })
					return
				}
				for range 5 { // five polls of the skewed instance
					inboxtest.Idle(t, thief)
					ahead.Advance(time.Second)
				}
				inboxtest.Idle(t, thief)
				if n := ev.Len(); n != 0 {
					t.Fatalf("an instance an hour ahead took a held row %d times on the database clock", n)
				}
				if got := thief.Stats().Claims; got < 5 {
					t.Fatalf("the skewed instance claimed only %d times; the test proves nothing", got)
				}
			})
		}
	})
}

// With the database clock on Postgres, publishes work, and a row-lock
// retry counts its delay from the retry, not from the claim.
func TestDatabaseClockPublishAndRowlockRetry(t *testing.T) {
	url := inboxtest.Postgres(t)
	b := open(t, url, inbox.WithClock(clock.Database{}))
	q := inbox.MustQueue[Job]("jobs")
	ctx := context.Background()
	if _, err := inbox.Publish(ctx, b, q, Job{Payload: []byte("now")}); err != nil {
		t.Fatalf("publish on the database clock: %v", err)
	}
	if _, err := inbox.Publish(ctx, b, q, Job{Payload: []byte("later")}, inbox.Delay(time.Hour)); err != nil {
		t.Fatalf("delayed publish on the database clock: %v", err)
	}
	var ahead float64
	if err := b.DB().QueryRow("SELECT extract(epoch FROM locked_until - now()) FROM jobs WHERE locked_until IS NOT NULL").Scan(&ahead); err != nil {
		t.Fatal(err)
	}
	if ahead < 3500 || ahead > 3700 {
		t.Fatalf("a publish delayed an hour is %vs ahead", ahead)
	}
	if _, err := b.DB().Exec("DELETE FROM jobs WHERE locked_until IS NOT NULL"); err != nil {
		t.Fatal(err)
	}
	settled := make(chan struct{})
	var once sync.Once // under load the retry may be handled before the stop
	sub, err := inbox.Subscribe(b, q, func(ctx context.Context, j Job) error {
		time.Sleep(1500 * time.Millisecond) // the handler's work, longer than the delay it asks for
		return inbox.RetryAfter(time.Second, nil)
	}, inbox.Form(rowlock.Form), inbox.Observe(func(inbox.Event) { once.Do(func() { close(settled) }) }))
	if err != nil {
		t.Fatal(err)
	}
	stop := inboxtest.RunSubscription(t, sub)
	<-settled
	stop()
	var left sql.NullFloat64
	if err := b.DB().QueryRow("SELECT extract(epoch FROM locked_until - clock_timestamp()) FROM jobs").Scan(&left); err != nil {
		t.Fatal(err)
	}
	if !left.Valid || left.Float64 < 0.2 {
		t.Fatalf("after a retry of one second, the row is due in %v s: the delay counted from the claim", left)
	}
}
