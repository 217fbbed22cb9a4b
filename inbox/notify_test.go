package inbox_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// Two instances on one Postgres table, a poll of one minute: a publish from
// instance A and an insert by plain SQL (announced by the trigger) are both
// claimed by B at once; so is an insert after B's listener lost its session.
func TestNotifyWakesOtherInstances(t *testing.T) {
	url := inboxtest.Postgres(t)
	a := open(t, url, inbox.ListenNotify(), inbox.PollInterval(time.Minute))
	b := open(t, url, inbox.ListenNotify(), inbox.PollInterval(time.Minute))
	if err := migrations.ApplyNotifyTrigger(context.Background(), a.DB(), "jobs"); err != nil {
		t.Fatal(err)
	}
	q := inbox.MustQueue[Job]("jobs")
	got := make(chan Job, 10)
	sub, err := inbox.Subscribe(b, q, func(ctx context.Context, j Job) error { got <- j; return nil })
	if err != nil {
		t.Fatal(err)
	}
	inboxtest.RunSubscription(t, sub)
	<-b.Listener().Ready()
	inboxtest.Idle(t, sub)

	expect := func(what string, write func() error) {
		t.Helper()
		start := time.Now()
		if err := write(); err != nil {
			t.Fatal(err)
		}
		select {
		case j := <-got:
			waited := time.Since(start)
			t.Logf("%s -> claimed by the other instance in %v (poll interval 1m)", what, waited)
			if waited > 2*time.Second {
				t.Fatalf("%s took %v, want well under the poll", what, waited)
			}
			_ = j
		case <-time.After(20 * time.Second):
			t.Fatalf("%s not claimed within 20s with a one-minute poll", what)
		}
		inboxtest.Idle(t, sub)
	}
	expect("publish from instance A", func() error {
		_, err := inbox.Publish(context.Background(), a, q, Job{Payload: []byte("a")})
		return err
	})
	expect("insert by plain SQL", func() error {
		_, err := a.DB().Exec("INSERT INTO jobs (payload) VALUES ('sql')")
		return err
	})

	// The listener's session ends: it reconnects, and what is written after
	// is still seen at once.
	pid := b.Listener().PID()
	if _, err := a.DB().Exec("SELECT pg_terminate_backend($1)", int(pid)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for b.Listener().PID() == pid || b.Listener().PID() == 0 {
		select {
		case <-b.Listener().Ready():
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the listener did not reconnect within 20s")
		}
	}
	<-b.Listener().Ready()
	inboxtest.Idle(t, sub)
	expect("insert after the listener reconnected", func() error {
		_, err := a.DB().Exec("INSERT INTO jobs (payload) VALUES ('after')")
		return err
	})
}

// A burst of notifications costs a handful of claims, not one each.
func TestNotifyBurstCoalesces(t *testing.T) {
	url := inboxtest.Postgres(t)
	b := open(t, url, inbox.ListenNotify(), inbox.PollInterval(time.Minute))
	sub := listening(t, b, inbox.MustQueue[Job]("jobs"), func(context.Context, Job) error { return nil })
	before := sub.Stats().Claims
	// Distinct payloads: Postgres folds identical notifications of one
	// transaction into one.
	if _, err := b.DB().Exec("SELECT pg_notify('jobs', 'g' || i) FROM generate_series(1, 1000) AS i"); err != nil {
		t.Fatal(err)
	}
	// The burst is over once a notification sent after it has been seen.
	w := inboxtestHubWait(t, b)
	if _, err := b.DB().Exec("SELECT pg_notify('jobs', 'last')"); err != nil {
		t.Fatal(err)
	}
	w()
	inboxtest.Idle(t, sub)
	claims := sub.Stats().Claims - before
	t.Logf("1000 notifications -> %d claims", claims)
	if claims > 50 {
		t.Fatalf("1000 notifications cost %d claims; wake-ups must coalesce", claims)
	}
	if claims < 1 {
		t.Fatal("1000 notifications caused no claim at all")
	}
}

// listening runs a subscription of q on b until the test ends, and returns
// it once b's listener listens and the subscription is idle.
func listening(t *testing.T, b *inbox.Broker, q inbox.Queue[Job], h inbox.Handler[Job], opts ...inbox.SubOption) *inbox.Subscription {
	t.Helper()
	sub, err := inbox.Subscribe(b, q, h, opts...)
	if err != nil {
		t.Fatal(err)
	}
	inboxtest.RunSubscription(t, sub)
	<-b.Listener().Ready()
	inboxtest.Idle(t, sub)
	return sub
}

// inboxtestHubWait subscribes to the "jobs"/"last" wake and returns a wait.
func inboxtestHubWait(t *testing.T, b *inbox.Broker) func() {
	w := b.Hub().Subscribe("jobs", "last")
	return func() {
		defer w.Close()
		select {
		case <-w.C():
		case <-time.After(20 * time.Second):
			t.Fatal("the last notification never arrived")
		}
	}
}

// The listener's connection counts against the pool: a pool of three with
// a listener still runs eight workers, never failing.
func TestNotifyWithSmallPool(t *testing.T) {
	url := inboxtest.Postgres(t)
	b := open(t, url, inbox.ListenNotify(), inbox.MaxConns(3))
	insert(t, b.DB(), 50)
	ev := inboxtest.NewEvents(t)
	sub, err := inbox.Subscribe(b, inbox.MustQueue[Job]("jobs"), func(context.Context, Job) error { return nil },
		inbox.Workers(8), ev.Observe())
	if err != nil {
		t.Fatal(err)
	}
	inboxtest.RunSubscription(t, sub)
	evs := ev.Wait("50 handlings", func(e []inbox.Event) bool { return len(e) >= 50 })
	if n := inboxtest.Count(evs, inbox.Acked); n != 50 {
		t.Fatalf("%d of %d acked", n, len(evs))
	}
	if _, err := inbox.Open(url, inbox.ListenNotify(), inbox.MaxConns(2)); err == nil {
		t.Fatal("a pool of two with a listener was accepted")
	}
}

// A publish with ListenNotify wakes its own process once: the hub at once,
// and its own notification, read back by the listener, is skipped. Woken
// twice, a subscription claimed again, found nothing, and held the next
// publish's claim for the wake cooldown.
func TestPublishWithNotifyClaimsOnce(t *testing.T) {
	url := inboxtest.Postgres(t)
	b := open(t, url, inbox.ListenNotify(), inbox.PollInterval(time.Minute))
	q := inbox.MustQueue[Job]("jobs")
	got := make(chan Job, 10)
	// Four workers: a claim for one row comes back short, and is not
	// repeated at once as a full one is.
	sub := listening(t, b, q, func(ctx context.Context, j Job) error { got <- j; return nil }, inbox.Workers(4))
	before := sub.Stats().Claims
	const n = 5
	for i := range n {
		if _, err := inbox.Publish(context.Background(), b, q, Job{Payload: []byte("p")}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-got:
		case <-time.After(20 * time.Second):
			t.Fatalf("publish %d not handled within 20s (poll: a minute)", i)
		}
		// The notification of this publish is read before the next: a
		// notification sent after it has come through the listener.
		w := inboxtestHubWait(t, b)
		if _, err := b.DB().Exec("SELECT pg_notify('jobs', 'last')"); err != nil {
			t.Fatal(err)
		}
		w()
		inboxtest.Idle(t, sub)
	}
	// Each marker notification ('last') is a wake of its own, keyed to no
	// group the subscription filters on: it claims once too, or folds into
	// a claim in flight (fewer claims under load). More would be the bug.
	claims := sub.Stats().Claims - before
	t.Logf("%d publishes and %d marker notifications: %d claims", n, n, claims)
	if claims > 2*n {
		t.Fatalf("%d publishes (and %d marker notifications) made %d claims, want at most %d: a publish's own notification woke its process again", n, n, claims, 2*n)
	}
}

// With ListenNotify, Publish stamps its notification with its hub (which
// it wakes itself: the hub's listener skips it), and PublishTx does not
// (its wake may come before the commit; the notification, at commit, is
// the one that finds the row).
func TestPublishStampsItsNotification(t *testing.T) {
	url := inboxtest.Postgres(t)
	b := open(t, url, inbox.ListenNotify())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN jobs"); err != nil {
		t.Fatal(err)
	}
	// Other tests notify on "jobs" too: this one's group tells its own.
	group := "stamp-" + time.Now().Format("150405.000000000")
	q := inbox.MustQueue[Job]("jobs").Group(group)
	next := func(what string) string {
		t.Helper()
		for {
			n, err := conn.WaitForNotification(ctx)
			if err != nil {
				t.Fatalf("%s: no notification: %v", what, err)
			}
			if strings.HasPrefix(n.Payload, group) {
				return n.Payload
			}
		}
	}
	if _, err := inbox.Publish(ctx, b, q, Job{Payload: []byte("p")}); err != nil {
		t.Fatal(err)
	}
	if got, want := next("Publish"), b.Hub().Stamp(group); got != want {
		t.Fatalf("Publish notified %q, want %q (stamped with its hub)", got, want)
	}
	tx, err := b.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inbox.PublishTx(ctx, b, tx, q, Job{Payload: []byte("p")}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := next("PublishTx"); got != group {
		t.Fatalf("PublishTx notified %q, want %q (unstamped)", got, group)
	}
}
