package inbox_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/claim/rowlock"
	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
)

// On Postgres a release never waits on a row lock another transaction
// holds on a child: that row is a claim's or another release's, and a
// row-lock handler holding it may wait for the release's connection (two
// row-lock subscriptions past the pool stalled so). The child is released
// by the sweep once the lock is gone.
func TestDepsReleasePassesALockedChild(t *testing.T) {
	t.Parallel()
	url := inboxtest.Postgres(t)
	b := open(t, url, inbox.PollInterval(50*time.Millisecond))
	table := depsTable(t, b)
	q := inbox.MustQueue[Job](table).Group("rows")
	done := q.Group("done")
	p := publishP(t, b, q, "parent")
	c := publishP(t, b, done, "child", inbox.After(p))
	side, err := inbox.OpenDB(url)
	if err != nil {
		t.Fatal(err)
	}
	defer side.Close()
	tx, err := side.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var locked int64
	if err := tx.QueryRow(fmt.Sprintf("SELECT id FROM %s WHERE id = %d FOR UPDATE", table, c)).Scan(&locked); err != nil {
		t.Fatal(err)
	}
	evs := inboxtest.NewEvents(t)
	sub, err := inbox.Subscribe(b, q, func(context.Context, Job) error { return nil }, inbox.Form(rowlock.Form), evs.Observe())
	if err != nil {
		t.Fatal(err)
	}
	inboxtest.RunSubscription(t, sub)
	// Before, the ack waited on the lock for the release's 30 s.
	start := time.Now()
	evs.WaitFor(15*time.Second, "the parent's ack while its child is locked", func(all []inbox.Event) bool {
		return inboxtest.Count(all, inbox.Acked) == 1
	})
	t.Logf("parent acked in %v with its child locked", time.Since(start))
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	ran := make(chan int64, 1)
	onDone, err := inbox.Subscribe(b, done, func(ctx context.Context, j Job) error { ran <- j.ID; return nil }, inbox.Form(rowlock.Form))
	if err != nil {
		t.Fatal(err)
	}
	inboxtest.RunSubscription(t, onDone)
	select {
	case id := <-ran:
		if id != c {
			t.Fatalf("ran row %d, want the child %d", id, c)
		}
	case <-time.After(inboxtest.Timeout):
		t.Fatal("the child was never released")
	}
}
