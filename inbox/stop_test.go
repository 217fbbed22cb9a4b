package inbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
)

// A stop while settlements are still running waits for them, not for the
// shutdown timeout: with one worker, the first row's ack is held by a row
// lock while the second row's handler runs; the stop comes, then both
// finish, and Run returns at once.
func TestStopWithSettlementsPending(t *testing.T) {
	b, first, blocker := twoRowsAndABlocker(t)
	ctx := context.Background()
	secondStarted := make(chan struct{})
	releaseSecond := make(chan struct{})
	ev := inboxtest.NewEvents(t)
	sub, err := inbox.Subscribe(b, inbox.MustQueue[Job]("jobs"), func(ctx context.Context, j Job) error {
		if j.ID == first {
			var id int64
			return blocker.QueryRowContext(ctx, "SELECT id FROM jobs WHERE id = $1 FOR UPDATE", j.ID).Scan(&id)
		}
		close(secondStarted)
		<-releaseSecond
		return nil
	}, inbox.Workers(1), inbox.ShutdownTimeout(time.Minute), ev.Observe())
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	runDone := make(chan error, 1)
	go func() { runDone <- sub.Run(rctx) }()
	<-secondStarted
	cancel()
	if err := blocker.Commit(); err != nil {
		t.Fatal(err)
	}
	ev.Wait("the first row acked", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Acked) == 1 })
	close(releaseSecond)
	start := time.Now()
	select {
	case err := <-runDone:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("Run returned %v after the last handler was let go", time.Since(start))
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30s of the last settlement (the shutdown timeout is a minute)")
	}
	if n := inboxtest.Count(ev.All(), inbox.Acked); n != 2 {
		t.Fatalf("%d rows acked, want 2", n)
	}
}

// A stop waits for an ack the lease form is still sending, which runs on
// the form's own goroutine once the worker is free: Run returns only once
// the ack is answered and observed.
func TestStopWaitsForAckInFlight(t *testing.T) {
	b, first, blocker := twoRowsAndABlocker(t)
	if _, err := b.DB().Exec("DELETE FROM jobs WHERE id <> $1", first); err != nil {
		t.Fatal(err)
	}
	handled := make(chan struct{})
	ev := inboxtest.NewEvents(t)
	sub, err := inbox.Subscribe(b, inbox.MustQueue[Job]("jobs"), func(ctx context.Context, j Job) error {
		// The row lock this takes holds the ack's delete until the commit.
		var id int64
		err := blocker.QueryRowContext(ctx, "SELECT id FROM jobs WHERE id = $1 FOR UPDATE", j.ID).Scan(&id)
		close(handled)
		return err
	}, inbox.Workers(1), ev.Observe())
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- sub.Run(rctx) }()
	<-handled
	cancel()
	// The ack's delete waits on the lock: Run must wait with it.
	select {
	case err := <-runDone:
		t.Fatalf("Run returned (%v) while the ack was still held by a row lock", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := blocker.Commit(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-runDone:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30s of the ack's lock being let go")
	}
	if n := inboxtest.Count(ev.All(), inbox.Acked); n != 1 {
		t.Fatalf("%d acks observed by the time Run returned, want 1", n)
	}
	if n := rows(t, b.DB()); n != 0 {
		t.Fatalf("%d rows left after the ack", n)
	}
}

// A claim blocked in the database does not hold the stop for ever.
func TestStopWithAClaimBlocked(t *testing.T) {
	url := inboxtest.Postgres(t)
	b := open(t, url, inbox.PollInterval(time.Hour))
	sub, err := inbox.Subscribe(b, inbox.MustQueue[Job]("jobs"), func(context.Context, Job) error { return nil },
		inbox.ShutdownTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx) }()
	inboxtest.Idle(t, sub)
	locker := inboxtest.Open(t, url)
	tx, err := locker.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	b.Wake("jobs", "") // a claim now waits on the table lock
	eventually(t, "the claim to block", func() bool { return sub.Stats().Claims >= 2 })
	start := time.Now()
	cancel()
	select {
	case <-done:
		t.Logf("Run returned %v after the stop, with a claim blocked", time.Since(start))
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return within 20s of the stop while a claim was blocked")
	}
}
