package notify_test

import (
	"context"
	"database/sql"
	"os"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/notify"
)

func postgres(t *testing.T) *sql.DB {
	t.Helper()
	u := os.Getenv("POSTGRES_TEST_URL")
	if u == "" {
		t.Skip("POSTGRES_TEST_URL is not set: skipping a Postgres test")
	}
	db, _, err := dialect.Open(u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func waitWake(t *testing.T, w *notify.Waiter, what string) {
	t.Helper()
	select {
	case <-w.C():
	case <-time.After(10 * time.Second):
		t.Fatalf("no wake within 10s: %s", what)
	}
}

// startListener listens on channel and runs l until ctx ends, once it is
// ready; Run's error comes on the channel returned.
func startListener(t *testing.T, ctx context.Context, l *notify.Listener, channel string) chan error {
	t.Helper()
	l.Listen(channel)
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	select {
	case <-l.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("listener not ready within 10s")
	}
	return done
}

func TestListenerCarriesNotifyAndSurvivesTermination(t *testing.T) {
	db := postgres(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hub := notify.NewHub()
	l := notify.NewListener(db, hub, nil)
	channel := "notify_test_" + time.Now().Format("150405.000000")
	w := hub.Subscribe(channel, "eu")
	defer w.Close()
	done := startListener(t, ctx, l, channel)
	waitWake(t, w, "the wake after the first connection") // a fresh session wakes everyone once

	start := time.Now()
	if _, err := db.ExecContext(ctx, "SELECT pg_notify($1, 'eu')", channel); err != nil {
		t.Fatal(err)
	}
	waitWake(t, w, "pg_notify with the waiter's key")
	t.Logf("notify to wake: %v", time.Since(start))

	pid := l.PID()
	if _, err := db.ExecContext(ctx, "SELECT pg_terminate_backend($1)", int(pid)); err != nil {
		t.Fatal(err)
	}
	// The listener wakes every waiter once it listens again on a new session.
	waitWake(t, w, "the wake after reconnecting")
	if l.PID() == pid || l.PID() == 0 {
		t.Fatalf("listener pid %d after terminating %d", l.PID(), pid)
	}
	if _, err := db.ExecContext(ctx, "SELECT pg_notify($1, '')", channel); err != nil {
		t.Fatal(err)
	}
	waitWake(t, w, "pg_notify after the reconnect")
	cancel()
	if err := <-done; err != context.Canceled {
		t.Fatalf("Run returned %v, want context.Canceled", err)
	}
}

// A notification stamped by the listener's own hub is skipped (its writer
// woke this process already); one stamped by another hub wakes by its key,
// as an unstamped one does. Notifications of one session arrive in order, so
// once the later ones have woken their waiters the skipped one is known to
// have been read.
func TestListenerSkipsItsOwnHubsStamp(t *testing.T) {
	db := postgres(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hub, other := notify.NewHub(), notify.NewHub()
	l := notify.NewListener(db, hub, nil)
	channel := "notify_stamp_" + time.Now().Format("150405.000000")
	own, theirs, plain := hub.Subscribe(channel, "own"), hub.Subscribe(channel, "theirs"), hub.Subscribe(channel, "plain")
	for _, w := range []*notify.Waiter{own, theirs, plain} {
		defer w.Close()
	}
	done := startListener(t, ctx, l, channel)
	for _, w := range []*notify.Waiter{own, theirs, plain} {
		waitWake(t, w, "the wake after the first connection")
	}
	conn, err := db.Conn(ctx) // one session: its notifications arrive in order
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, payload := range []string{hub.Stamp("own"), other.Stamp("theirs"), "plain"} {
		if _, err := conn.ExecContext(ctx, "SELECT pg_notify($1, $2)", channel, payload); err != nil {
			t.Fatal(err)
		}
	}
	waitWake(t, theirs, "a notification stamped by another hub")
	waitWake(t, plain, "an unstamped notification")
	select {
	case <-own.C():
		t.Fatal("a notification stamped by the listener's own hub woke its waiter")
	default:
	}
	cancel()
	<-done
}
