package inbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
)

// leaseOf is the lease of the one row of jobs, which must not be parked.
func leaseOf(t *testing.T, b *inbox.Broker) time.Time {
	t.Helper()
	rows := inboxtest.Rows(t, b, inbox.MustQueue[Job]("jobs"))
	if len(rows) != 1 || rows[0].State == inboxtest.Parked {
		t.Fatalf("rows: %v, want one not parked", rows)
	}
	return rows[0].LockedUntil
}

// A handler that runs past most of its lease gets it extended, so no other
// claimer takes the row; when the lease is taken over anyway, the handler's
// context ends with ErrLeaseLost and its outcome changes nothing.
func TestLeaseExtensionAndLoss(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		clk := fake()
		b := open(t, url, inbox.WithClock(clk), inbox.PollInterval(time.Hour))
		other := open(t, url, inbox.WithClock(clk), inbox.PollInterval(time.Hour))
		insert(t, b.DB(), 1)
		started := make(chan struct{})
		finish := make(chan struct{})
		cause := make(chan error, 1)
		ev := inboxtest.NewEvents(t)
		sub, err := inbox.Subscribe(b, inbox.MustQueue[Job]("jobs"), func(ctx context.Context, j Job) error {
			close(started)
			select {
			case <-finish:
				return nil
			case <-ctx.Done():
				cause <- context.Cause(ctx)
				return ctx.Err()
			}
		}, inbox.Lease(9*time.Second), ev.Observe())
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
		<-started
		first := leaseOf(t, b)
		if want := epoch.Add(9 * time.Second); !first.Equal(want) {
			t.Fatalf("lease written = %v, want %v", first, want)
		}
		clk.Advance(6 * time.Second) // two thirds of the lease
		inboxtest.WaitRows(t, b, inbox.MustQueue[Job]("jobs"), "the lease extended", func(rows []inboxtest.Row) bool {
			return len(rows) == 1 && rows[0].LockedUntil.Equal(epoch.Add(15*time.Second))
		})

		// Another instance finds nothing to take at the first lease's end.
		otherEv := inboxtest.NewEvents(t)
		thief, err := inbox.Subscribe(other, inbox.MustQueue[Job]("jobs"), func(context.Context, Job) error { return nil }, otherEv.Observe())
		if err != nil {
			t.Fatal(err)
		}
		clk.Advance(4 * time.Second) // past the first lease, before the extended one
		inboxtest.RunSubscription(t, thief)
		inboxtest.Idle(t, thief)
		if otherEv.Len() != 0 {
			t.Fatal("another instance took a row whose lease was extended")
		}

		// Someone takes the row over: the next extension finds it lost.
		steal := "UPDATE jobs SET locked_until = $1"
		var arg any = epoch.Add(time.Hour)
		if b.Dialect() == "sqlite" {
			steal, arg = "UPDATE jobs SET locked_until = ?1", epoch.Add(time.Hour).Format("2006-01-02 15:04:05.000")
		}
		if _, err := b.DB().Exec(sqlFor(b, steal), arg); err != nil {
			t.Fatal(err)
		}
		clk.Advance(6 * time.Second)
		select {
		case err := <-cause:
			if !errors.Is(err, inbox.ErrLeaseLost) {
				t.Fatalf("handler context ended with %v, want ErrLeaseLost", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the handler was not told its lease was lost")
		}
		ev.Wait("the lost outcome", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Lost) == 1 })
		if n := rows(t, b.DB()); n != 1 {
			t.Fatalf("rows = %d; a lost holder's outcome must change nothing", n)
		}
		close(finish)
	})
}
