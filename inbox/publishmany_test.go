package inbox_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// manyJobs makes n rows whose payloads say their place.
func manyJobs(n int) []Job {
	rows := make([]Job, n)
	for i := range rows {
		rows[i] = Job{Payload: fmt.Appendf(nil, "row %d", i)}
	}
	return rows
}

// checkIDs fails unless ids name rows in order: the row of ids[i] holds
// rows[i]'s payload, and group.
func checkIDs(t *testing.T, b *inbox.Broker, ids []int64, rows []Job, group string) {
	t.Helper()
	if len(ids) != len(rows) {
		t.Fatalf("%d ids for %d rows", len(ids), len(rows))
	}
	got := map[int64]string{}
	r, err := b.DB().Query("SELECT id, payload, group_name FROM jobs")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for r.Next() {
		var id int64
		var p []byte
		var g string
		if err := r.Scan(&id, &p, &g); err != nil {
			t.Fatal(err)
		}
		got[id] = g + "/" + string(p)
	}
	if len(got) != len(rows) {
		t.Fatalf("%d rows in the table, want %d", len(got), len(rows))
	}
	for i, id := range ids {
		if want := group + "/" + string(rows[i].Payload); got[id] != want {
			t.Fatalf("ids[%d] = %d holds %q, want %q", i, id, got[id], want)
		}
	}
}

// PublishMany writes every row (on SQLite across several statements) and
// returns their ids in the rows' order; a group queue writes its group.
func TestPublishMany(t *testing.T) {
	eachPublishDB(t, func(t *testing.T, url string) {
		b := open(t, url)
		ctx := context.Background()
		rows := manyJobs(1234)
		ids, err := inbox.PublishMany(ctx, b, inbox.MustQueue[Job]("jobs").Group("invoices"), rows)
		if err != nil {
			t.Fatal(err)
		}
		checkIDs(t, b, ids, rows, "invoices")
		if ids, err := inbox.PublishMany(ctx, b, inbox.MustQueue[Job]("jobs"), []Job(nil)); err != nil || len(ids) != 0 {
			t.Fatalf("no rows: %v, %v", ids, err)
		}
	})
}

// A batch is handled by a subscription woken by it (the poll is an hour),
// and rows published At a time wait for it.
func TestPublishManyWakesAndWaits(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		clk := fake()
		b := open(t, url, inbox.WithClock(clk), inbox.PollInterval(time.Hour))
		q := inbox.MustQueue[Job]("jobs")
		ev := inboxtest.NewEvents(t)
		sub, err := inbox.Subscribe(b, q, func(context.Context, Job) error { return nil }, ev.Observe(), inbox.Workers(10))
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
		inboxtest.Idle(t, sub)
		ctx := context.Background()
		if _, err := inbox.PublishMany(ctx, b, q, manyJobs(100), inbox.At(epoch.Add(time.Minute))); err != nil {
			t.Fatal(err)
		}
		if _, err := inbox.PublishMany(ctx, b, q, manyJobs(50)); err != nil {
			t.Fatal(err)
		}
		ev.Wait("the batch published now", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Acked) == 50 })
		inboxtest.Idle(t, sub)
		if n := inboxtest.Count(ev.All(), inbox.Acked); n != 50 {
			t.Fatalf("%d rows handled before the later batch's time, want 50", n)
		}
		clk.Advance(time.Hour) // the poll: nothing wakes a subscription when a time comes
		ev.Wait("the batch published for a minute on", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Acked) == 150 })
	})
}

// PublishManyTx writes in the caller's transaction: nothing after a
// rollback, everything after a commit.
func TestPublishManyTx(t *testing.T) {
	eachPublishDB(t, func(t *testing.T, url string) {
		b := open(t, url)
		q := inbox.MustQueue[Job]("jobs")
		ctx := context.Background()
		for _, commit := range []bool{false, true} {
			tx, err := b.DB().BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			rows := manyJobs(700)
			ids, err := inbox.PublishManyTx(ctx, b, tx, q, rows)
			if err != nil {
				t.Fatal(err)
			}
			if !commit {
				tx.Rollback()
				if n := rowsIn(t, b); n != 0 {
					t.Fatalf("%d rows after a rollback", n)
				}
				continue
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			checkIDs(t, b, ids, rows, "")
		}
	})
}

func rowsIn(t *testing.T, b *inbox.Broker) int { return rows(t, b.DB()) }

// On a pgx pool, PublishManyTx takes a pgx.Tx; with ListenNotify and the
// database clock it still writes each row once, in order.
func TestPublishManyPgx(t *testing.T) {
	url := inboxtest.Postgres(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	b, err := inbox.New(pool, inbox.ListenNotify(), inbox.WithClock(clock.Database{}))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := migrations.Apply(ctx, b.DB(), "jobs"); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rows := manyJobs(300)
	ids, err := inbox.PublishManyTx(ctx, b, tx, inbox.MustQueue[Job]("jobs"), rows, inbox.At(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)))
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	checkIDs(t, b, ids, rows, "")
	var early int
	if err := b.DB().QueryRow("SELECT count(*) FROM jobs WHERE locked_until <> '2030-01-01T00:00:00Z'").Scan(&early); err != nil {
		t.Fatal(err)
	}
	if early != 0 {
		t.Fatalf("%d rows published At 2030 have another time", early)
	}
}
