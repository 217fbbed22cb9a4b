package inboxtest_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
)

// flakySMTP fails each email's first try, as a busy mail server would.
func flakySMTP() inbox.Handler[Email] {
	var mu sync.Mutex
	tried := map[int64]bool{}
	return func(ctx context.Context, e Email) error {
		mu.Lock()
		defer mu.Unlock()
		if !tried[e.ID] {
			tried[e.ID] = true
			return errors.New("smtp: 421 try again later")
		}
		return nil
	}
}

// A service test on the package example's mailer: a retry on the fake clock, recorded.
func TestMailer(t *testing.T) {
	ctx := context.Background()
	b := inboxtest.NewBroker(t, inboxtest.SQLite(t)) // or inboxtest.Postgres(t); a fake clock at inboxtest.Epoch
	rec := inboxtest.NewRecorder(t, b, emails)       // records every handling of the queue
	svc, err := newMailer(b, rec.Wrap("a", flakySMTP()), rec.Observe("a"))
	if err != nil {
		t.Fatal(err)
	}
	run := inboxtest.Start(t, svc) // returns once started; stopped (or the test fails) at cleanup

	id, err := inbox.Publish(ctx, b, emails, Email{Payload: []byte("ada")})
	if err != nil {
		t.Fatal(err)
	}
	if h := rec.WaitHandled(id); h.Outcome != inbox.Retried {
		t.Fatalf("first try: %v", h)
	}
	t.Log(inboxtest.Rows(t, b, emails)) // id 1: locked until 2026-01-01T00:00:00.952Z, attempts 1, last error "smtp: 421 ..."
	run.Advance(time.Second)            // waits until the service is idle, then moves the clock past the backoff
	rec.WaitDrained()
	if n := rec.Count(id); n != 2 { // the failed try, then the one that went
		t.Fatalf("handled %d times, want 2", n)
	}
	rec.NoOverlaps() // never held by two holders at once
}
