package inbox_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
)

// A worker is free for the next row once its handler returns: the row's
// ack goes on beside it. With one worker, the first row's ack is held up by
// a row lock from another transaction; the second row is handled while the
// first is still in the table, and both are acked once the lock goes.
func TestWorkerFreeWhileItsAckRuns(t *testing.T) {
	b, first, blocker := twoRowsAndABlocker(t)

	secondStarted := make(chan int, 1) // rows left in the table when it starts
	ev := inboxtest.NewEvents(t)
	sub, err := inbox.Subscribe(b, inbox.MustQueue[Job]("jobs"), func(ctx context.Context, j Job) error {
		if j.ID == first {
			// Lock the row we hold, so its ack waits for the blocker.
			var id int64
			return blocker.QueryRowContext(ctx, "SELECT id FROM jobs WHERE id = $1 FOR UPDATE", j.ID).Scan(&id)
		}
		var n int
		if err := b.DB().QueryRowContext(ctx, "SELECT count(*) FROM jobs").Scan(&n); err != nil {
			return err
		}
		secondStarted <- n
		return nil
	}, inbox.Workers(1), ev.Observe())
	if err != nil {
		t.Fatal(err)
	}
	inboxtest.RunSubscription(t, sub)

	select {
	case n := <-secondStarted:
		if n != 2 {
			t.Fatalf("%d rows in the table when the second row was handled, want 2 (the first one's ack held up)", n)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the second row waited 30s for the first one's ack: the worker was not freed when its handler returned")
	}
	if got := inboxtest.Count(ev.All(), inbox.Acked); got != 0 {
		t.Fatalf("%d rows acked while the first ack was held up, want 0", got)
	}
	if err := blocker.Commit(); err != nil {
		t.Fatal(err)
	}
	ev.Wait("both rows acked", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Acked) == 2 })
	if n := rows(t, b.DB()); n != 0 {
		t.Fatalf("%d rows left, want 0", n)
	}
}

// A claim for fewer than half the workers waits a little for more of them,
// never for good: with three of four workers held, a new row still reaches
// the fourth.
func TestFewFreeWorkersStillClaim(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		b := open(t, url, inbox.PollInterval(time.Hour))
		insert(t, b.DB(), 3)
		hold := make(chan struct{})
		defer close(hold)
		started := make(chan int64, 4)
		sub, err := inbox.Subscribe(b, inbox.MustQueue[Job]("jobs"), func(ctx context.Context, j Job) error {
			started <- j.ID
			if string(j.Payload) == "held" {
				<-hold
			}
			return nil
		}, inbox.Workers(4))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.DB().Exec("UPDATE jobs SET payload = 'held'"); err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
		for range 3 {
			<-started
		}
		q := inbox.MustQueue[Job]("jobs")
		if _, err := inbox.Publish(context.Background(), b, q, Job{Payload: []byte("free")}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			t.Fatal("a row published while 3 of 4 workers were held was not handled in 30s")
		}
	})
}

// twoRowsAndABlocker opens a broker on Postgres (where a row lock held by
// another transaction holds up an ack's DELETE) with two rows in "jobs",
// and returns the first row's id and a transaction a handler can lock it
// with; the transaction is rolled back when the test ends.
func twoRowsAndABlocker(t *testing.T) (b *inbox.Broker, first int64, blocker *sql.Tx) {
	t.Helper()
	b = open(t, inboxtest.Postgres(t), inbox.PollInterval(time.Hour))
	insert(t, b.DB(), 2)
	if err := b.DB().QueryRow("SELECT min(id) FROM jobs").Scan(&first); err != nil {
		t.Fatal(err)
	}
	blocker, err := b.DB().BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { blocker.Rollback() })
	return b, first, blocker
}
