package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/claim"
	"github.com/sqlinbox/sqlinbox/claim/advisory"
	"github.com/sqlinbox/sqlinbox/claim/lease"
	"github.com/sqlinbox/sqlinbox/claim/rowlock"
	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
)

// openSent opens a broker on the reference table and a table of effects,
// sent, that handlers write to.
func openSent(t *testing.T, url string) *inbox.Broker {
	t.Helper()
	b := open(t, url)
	if _, err := b.DB().Exec("CREATE TABLE sent (job bigint PRIMARY KEY, attempt int NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	return b
}

func sentRows(t *testing.T, b *inbox.Broker) int {
	t.Helper()
	var n int
	if err := b.DB().QueryRow("SELECT count(*) FROM sent").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A transactional handler's writes commit with the row's ack, and roll
// back with its failure: after a failed attempt and a good one, each row
// has one effect and is gone.
func TestHandleTxCommitsWithTheAck(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) { handleTxCommits(t, url, lease.Form) })
	lockDBs(t, "rowlock", func(t *testing.T, url string) { handleTxCommits(t, url, rowlock.Form) })
	lockDBs(t, "advisory", func(t *testing.T, url string) { handleTxCommits(t, url, advisory.Form) })
}

func handleTxCommits(t *testing.T, url string, form claim.Form) {
	{
		b := openSent(t, url)
		q := inbox.MustQueue[Job]("jobs")
		ids, err := inbox.PublishMany(context.Background(), b, q, manyJobs(10))
		if err != nil {
			t.Fatal(err)
		}
		ev := inboxtest.NewEvents(t)
		sub, err := inbox.SubscribeTx(b, q, func(ctx context.Context, tx *sql.Tx, j Job) error {
			if _, err := tx.ExecContext(ctx, sqlFor(b, "INSERT INTO sent (job, attempt) VALUES ($1, $2)"), j.ID, j.Attempts); err != nil {
				return err
			}
			if j.Attempts == 1 && j.ID%2 == 0 {
				return inbox.RetryAfter(time.Millisecond, errors.New("the mail server said no"))
			}
			return nil
		}, ev.Observe(), inbox.Workers(4), inbox.Form(form))
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
		ev.Wait("every row acked", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Acked) == len(ids) })
		if n := inboxtest.Count(ev.All(), inbox.Retried); n != len(ids)/2 {
			t.Fatalf("%d retried, want %d", n, len(ids)/2)
		}
		if n := sentRows(t, b); n != len(ids) {
			t.Fatalf("%d effects for %d rows: a failed attempt's write was kept, or a good one's lost", n, len(ids))
		}
		var wrong int
		if err := b.DB().QueryRow("SELECT count(*) FROM sent WHERE job % 2 = 0 AND attempt <> 2").Scan(&wrong); err != nil {
			t.Fatal(err)
		}
		if wrong != 0 || rowsIn(t, b) != 0 {
			t.Fatalf("%d effects of a failed attempt kept; %d rows left", wrong, rowsIn(t, b))
		}
	}
}

// A handler whose lease was taken over while it ran cannot commit: its
// write is rolled back and the handling reported lost; the row stays with
// its new holder.
func TestHandleTxLostLeaseCannotCommit(t *testing.T) {
	url := inboxtest.Postgres(t)
	b := openSent(t, url)
	q := inbox.MustQueue[Job]("jobs")
	id, err := inbox.Publish(context.Background(), b, q, Job{Payload: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	ev := inboxtest.NewEvents(t)
	sub, err := inbox.SubscribeTx(b, q, func(ctx context.Context, tx *sql.Tx, j Job) error {
		if _, err := tx.ExecContext(ctx, sqlFor(b, "INSERT INTO sent (job, attempt) VALUES ($1, $2)"), j.ID, j.Attempts); err != nil {
			return err
		}
		// Another holder takes the row over: its lease ran out, say.
		_, err := b.DB().ExecContext(ctx, "UPDATE jobs SET locked_until = now() + interval '1 hour' WHERE id = $1", j.ID)
		return err
	}, ev.Observe())
	if err != nil {
		t.Fatal(err)
	}
	inboxtest.RunSubscription(t, sub)
	ev.Wait("the handling", func(e []inbox.Event) bool { return len(e) == 1 })
	if e := ev.All()[0]; e.Outcome != inbox.Lost {
		t.Fatalf("outcome %v (%v), want lost", e.Outcome, e.Err)
	}
	if n := sentRows(t, b); n != 0 {
		t.Fatalf("a handler that lost its lease committed %d effects", n)
	}
	var left int64
	if err := b.DB().QueryRow("SELECT id FROM jobs").Scan(&left); err != nil || left != id {
		t.Fatalf("the row taken over is gone: %v", err)
	}
}

// A panic rolls the handler's writes back; the row is retried.
func TestHandleTxPanicRollsBack(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) { handleTxPanic(t, url, lease.Form) })
	lockDBs(t, "rowlock", func(t *testing.T, url string) { handleTxPanic(t, url, rowlock.Form) })
	lockDBs(t, "advisory", func(t *testing.T, url string) { handleTxPanic(t, url, advisory.Form) })
}

func handleTxPanic(t *testing.T, url string, form claim.Form) {
	{
		b := openSent(t, url)
		q := inbox.MustQueue[Job]("jobs")
		if _, err := inbox.Publish(context.Background(), b, q, Job{Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		ev := inboxtest.NewEvents(t)
		sub, err := inbox.SubscribeTx(b, q, func(ctx context.Context, tx *sql.Tx, j Job) error {
			if _, err := tx.ExecContext(ctx, sqlFor(b, "INSERT INTO sent (job, attempt) VALUES ($1, $2)"), j.ID, j.Attempts); err != nil {
				return err
			}
			panic("boom")
		}, ev.Observe(), inbox.MaxAttempts(1), inbox.Form(form))
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
		ev.Wait("the handling", func(e []inbox.Event) bool { return len(e) == 1 })
		if e := ev.All()[0]; e.Outcome != inbox.Parked {
			t.Fatalf("outcome %v (%v), want parked (MaxAttempts 1)", e.Outcome, e.Err)
		}
		if n := sentRows(t, b); n != 0 {
			t.Fatalf("a panicking handler committed %d effects", n)
		}
	}
}

// In the forms whose hold is a connection, the handler's transaction runs
// on it: when that session ends before the commit, the handler's write
// ends with it (the hold is gone, another claim may take the row), and
// the row's next handling writes the one effect.
func TestHandleTxSessionEndsBeforeCommit(t *testing.T) {
	for _, form := range []claim.Form{rowlock.Form, advisory.Form} {
		lockDBs(t, form.Name(), func(t *testing.T, url string) {
			b := openSent(t, url)
			q := inbox.MustQueue[Job]("jobs")
			if _, err := inbox.Publish(context.Background(), b, q, Job{Payload: []byte("x")}); err != nil {
				t.Fatal(err)
			}
			ev := inboxtest.NewEvents(t)
			sub, err := inbox.SubscribeTx(b, q, func(ctx context.Context, tx *sql.Tx, j Job) error {
				if _, err := tx.ExecContext(ctx, sqlFor(b, "INSERT INTO sent (job, attempt) VALUES ($1, $2)"), j.ID, j.Attempts); err != nil {
					return err
				}
				if j.Attempts > 1 {
					return nil
				}
				if b.Dialect() == "mysql" {
					var id int64
					if err := tx.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
						return err
					}
					_, err := b.DB().ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id))
					return err
				}
				var pid int
				if err := tx.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
					return err
				}
				_, err := b.DB().ExecContext(ctx, "SELECT pg_terminate_backend($1)", pid)
				return err
			}, ev.Observe(), inbox.Form(form), inbox.Workers(2))
			if err != nil {
				t.Fatal(err)
			}
			inboxtest.RunSubscription(t, sub)
			ev.Wait("the row acked", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Acked) == 1 })
			var n, attempt int
			if err := b.DB().QueryRow("SELECT count(*), max(attempt) FROM sent").Scan(&n, &attempt); err != nil {
				t.Fatal(err)
			}
			if n != 1 || attempt != 2 {
				t.Fatalf("%d effects (last of attempt %d), want one, of attempt 2: the first handling's write outlived its session", n, attempt)
			}
			if left := rowsIn(t, b); left != 0 {
				t.Fatalf("%d rows left", left)
			}
		})
	}
}

// A row deleted by someone who ignores the advisory lock: the handler's
// transaction finds nothing to ack and rolls back, reported lost.
func TestHandleTxAdvisoryRowGone(t *testing.T) {
	lockDBs(t, "advisory", handleTxAdvisoryRowGone)
}

func handleTxAdvisoryRowGone(t *testing.T, url string) {
	b := openSent(t, url)
	q := inbox.MustQueue[Job]("jobs")
	if _, err := inbox.Publish(context.Background(), b, q, Job{Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	ev := inboxtest.NewEvents(t)
	sub, err := inbox.SubscribeTx(b, q, func(ctx context.Context, tx *sql.Tx, j Job) error {
		if _, err := tx.ExecContext(ctx, sqlFor(b, "INSERT INTO sent (job, attempt) VALUES ($1, $2)"), j.ID, j.Attempts); err != nil {
			return err
		}
		_, err := b.DB().ExecContext(ctx, sqlFor(b, "DELETE FROM jobs WHERE id = $1"), j.ID)
		return err
	}, ev.Observe(), inbox.Form(advisory.Form))
	if err != nil {
		t.Fatal(err)
	}
	inboxtest.RunSubscription(t, sub)
	ev.Wait("the handling", func(e []inbox.Event) bool { return len(e) == 1 })
	if e := ev.All()[0]; e.Outcome != inbox.Lost || !errors.Is(e.Err, inbox.ErrHoldLost) && !strings.Contains(e.Err.Error(), "lost") {
		t.Fatalf("outcome %v (%v), want lost", e.Outcome, e.Err)
	}
	if n := sentRows(t, b); n != 0 {
		t.Fatalf("a handling whose row was gone committed %d effects", n)
	}
}
