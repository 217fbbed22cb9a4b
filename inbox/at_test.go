package inbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
)

// A publish At a time waits for that time on the broker's (fake) clock, and
// one At a past time is available at once.
func TestPublishAt(t *testing.T) {
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
		ctx := context.Background()
		if _, err := inbox.Publish(ctx, b, q, Job{Payload: []byte("later")}, inbox.At(epoch.Add(time.Minute))); err != nil {
			t.Fatal(err)
		}
		// Delay then At: the last wins, so this row is due at the epoch.
		if _, err := inbox.Publish(ctx, b, q, Job{Payload: []byte("past")}, inbox.Delay(time.Hour), inbox.At(epoch.Add(-time.Hour))); err != nil {
			t.Fatal(err)
		}
		ev.Wait("the row published for a past time", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Acked) == 1 })
		clk.Advance(59 * time.Second)
		inboxtest.Idle(t, sub)
		if n := inboxtest.Count(ev.All(), inbox.Acked); n != 1 {
			t.Fatalf("%d rows handled a second before the later one's time; want 1", n)
		}
		clk.Advance(time.Second)
		ev.Wait("the row published for a minute on", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Acked) == 2 })
	})
}

// With the database clock, At writes the time itself, not now plus the
// host's idea of the distance to it.
func TestPublishAtDatabaseClock(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		b := open(t, url, inbox.WithClock(clock.Database{}))
		q := inbox.MustQueue[Job]("jobs")
		at := time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)
		ctx := context.Background()
		if _, err := inbox.Publish(ctx, b, q, Job{Payload: []byte("at")}, inbox.At(at)); err != nil {
			t.Fatal(err)
		}
		if _, err := inbox.Publish(ctx, b, q, Job{Payload: []byte("now")}); err != nil {
			t.Fatal(err)
		}
		if _, err := inbox.Publish(ctx, b, q, Job{Payload: []byte("delay")}, inbox.Delay(time.Hour)); err != nil {
			t.Fatal(err)
		}
		var got, none, delayed any
		for p, dst := range map[string]*any{"at": &got, "now": &none, "delay": &delayed} {
			if err := b.DB().QueryRow(sqlFor(b, "SELECT locked_until FROM jobs WHERE payload = $1"), []byte(p)).Scan(dst); err != nil {
				t.Fatalf("row %q: %v", p, err)
			}
		}
		if none != nil {
			t.Fatalf("a publish with no time has locked_until %v, want NULL", none)
		}
		if delayed == nil {
			t.Fatalf("a delayed publish has locked_until NULL")
		}
		if !sameTime(t, got, at) {
			t.Fatalf("a publish At %v has locked_until %v", at, got)
		}
	})
}

// sameTime compares a locked_until as the driver returned it with want.
func sameTime(t *testing.T, v any, want time.Time) bool {
	t.Helper()
	switch x := v.(type) {
	case time.Time:
		return x.Equal(want)
	case string:
		return x == want.Format("2006-01-02 15:04:05.000")
	case []byte:
		return string(x) == want.Format("2006-01-02 15:04:05.000")
	}
	t.Fatalf("locked_until of type %T", v)
	return false
}
