package inbox_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
)

// A publish through the broker wakes its own subscriptions at once: the poll
// interval is an hour, so only the wake can explain a pickup.
func TestPublishWakesAtOnce(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		b := open(t, url, inbox.PollInterval(time.Hour))
		q := inbox.MustQueue[Job]("jobs")
		got := make(chan time.Time, 10)
		sub, err := inbox.Subscribe(b, q, func(ctx context.Context, j Job) error {
			got <- time.Now()
			return nil
		}, inbox.Workers(2))
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
		inboxtest.Idle(t, sub)
		for i := range 3 {
			start := time.Now()
			if _, err := inbox.Publish(context.Background(), b, q, Job{Payload: []byte("hello")}); err != nil {
				t.Fatal(err)
			}
			select {
			case at := <-got:
				t.Logf("publish %d -> handler start: %v", i, at.Sub(start))
			case <-time.After(10 * time.Second):
				t.Fatalf("publish %d not handled within 10s with an hour's poll", i)
			}
			inboxtest.Idle(t, sub)
		}
	})
}

// A publish with a delay waits out the delay on the broker's clock.
func TestPublishDelay(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		clk := fake()
		b := open(t, url, inbox.WithClock(clk))
		q := inbox.MustQueue[Job]("jobs")
		ev := inboxtest.NewEvents(t)
		sub, err := inbox.Subscribe(b, q, func(context.Context, Job) error { return nil }, ev.Observe())
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
		if _, err := inbox.Publish(context.Background(), b, q, Job{Payload: []byte("later")}, inbox.Delay(time.Minute)); err != nil {
			t.Fatal(err)
		}
		inboxtest.Idle(t, sub)
		clk.Advance(30 * time.Second)
		inboxtest.Idle(t, sub)
		if n := ev.Len(); n != 0 {
			t.Fatalf("a row delayed a minute was handled after 30s")
		}
		clk.Advance(31 * time.Second)
		ev.Wait("the delayed row", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Acked) == 1 })
	})
}

// A publish inside the caller's transaction is seen once it commits, and
// not at all when it rolls back.
func TestPublishTx(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		b := open(t, url, inbox.PollInterval(100*time.Millisecond))
		q := inbox.MustQueue[Job]("jobs")
		ctx := context.Background()
		tx, err := b.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := inbox.PublishTx(ctx, b, tx, q, Job{Payload: []byte("rolled back")}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		tx, err = b.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		id, err := inbox.PublishTx(ctx, b, tx, q, Job{Payload: []byte("committed")})
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		got := make(chan Job, 2)
		sub, err := inbox.Subscribe(b, q, func(ctx context.Context, j Job) error { got <- j; return nil })
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
		select {
		case j := <-got:
			if j.ID != id || string(j.Payload) != "committed" {
				t.Fatalf("handled %d %q, want %d committed", j.ID, j.Payload, id)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the committed publish was not handled")
		}
		inboxtest.Idle(t, sub)
		if len(got) != 0 || rows(t, b.DB()) != 0 {
			t.Fatal("a rolled-back publish was handled, or rows are left")
		}
		if _, err := inbox.PublishTx(ctx, b, "not a tx", q, Job{}); err == nil || !strings.Contains(err.Error(), "PublishTx takes") {
			t.Fatalf("PublishTx with a string: %v", err)
		}
	})
}

// A subscription of one group takes only that group's rows.
func TestGroups(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		b := open(t, url)
		q := inbox.MustQueue[Job]("jobs")
		for _, g := range []string{"eu", "us", "eu", "us", "eu"} {
			if _, err := inbox.Publish(context.Background(), b, q.Group(g), Job{Payload: []byte(g)}); err != nil {
				t.Fatal(err)
			}
		}
		ev := inboxtest.NewEvents(t)
		sub, err := inbox.Subscribe(b, q.Group("eu"), func(ctx context.Context, j Job) error {
			if j.Group != "eu" || string(j.Payload) != "eu" {
				t.Errorf("the eu subscription got a %q row", j.Group)
			}
			return nil
		}, inbox.Workers(2), ev.Observe())
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
		ev.Wait("three eu rows", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Acked) == 3 })
		inboxtest.Idle(t, sub)
		if n := rows(t, b.DB()); n != 2 {
			t.Fatalf("%d rows left, want the 2 us rows", n)
		}
	})
}

// A pool of two connections with eight workers handles everything: a small
// pool means fewer deliveries at once, never an error.
func TestSmallPool(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		b := open(t, url, inbox.MaxConns(2))
		insert(t, b.DB(), 100)
		ev := inboxtest.NewEvents(t)
		sub, err := inbox.Subscribe(b, inbox.MustQueue[Job]("jobs"), func(context.Context, Job) error { return nil },
			inbox.Workers(8), ev.Observe())
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
		evs := ev.Wait("100 acks", func(e []inbox.Event) bool { return len(e) >= 100 })
		if n := inboxtest.Count(evs, inbox.Acked); n != 100 {
			t.Fatalf("%d acked of %d handlings: %+v", n, len(evs), evs)
		}
		if st := b.DB().Stats(); st.MaxOpenConnections != 2 || st.OpenConnections > 2 {
			t.Fatalf("pool stats %+v", st)
		}
	})
}
