package inbox_test

import (
	"context"
	"database/sql"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlinbox/sqlinbox/claim/advisory"
	"github.com/sqlinbox/sqlinbox/claim/lease"
	"github.com/sqlinbox/sqlinbox/claim/rowlock"
	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/internal/claim"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// noted is a row type with a column the reference table lacks, added by
// the tests below; a NULL in it cannot be read into a string.
type noted struct {
	Job
	Note string `db:"note"`
}

// A row that cannot be read into the user's type fails on its own (retried,
// then parked with the scan error), in every form; the rows around it flow.
func TestUnreadableRowDoesNotStallTheQueue(t *testing.T) {
	forms := map[string][]claim.Form{"sqlite": {lease.Form}, "postgres": {lease.Form, rowlock.Form, advisory.Form}}
	eachDB(t, func(t *testing.T, url string) {
		for _, form := range forms[strings.SplitN(t.Name(), "/", 2)[1]] {
			t.Run(form.Name(), func(t *testing.T) {
				clk := fake()
				b := open(t, url, inbox.WithClock(clk))
				db := b.DB()
				// A fresh table for each form.
				if _, err := db.Exec("DROP TABLE jobs"); err != nil {
					t.Fatal(err)
				}
				if err := migrations.Apply(context.Background(), db, "jobs"); err != nil {
					t.Fatal(err)
				}
				if _, err := db.Exec("ALTER TABLE jobs ADD COLUMN note text"); err != nil {
					t.Fatal(err)
				}
				if _, err := db.Exec("INSERT INTO jobs (payload, note) VALUES ('bad', NULL)"); err != nil {
					t.Fatal(err)
				}
				for range 6 {
					if _, err := db.Exec("INSERT INTO jobs (payload, note) VALUES ('good', 'n')"); err != nil {
						t.Fatal(err)
					}
				}
				ev := inboxtest.NewEvents(t)
				sub, err := inbox.Subscribe(b, inbox.MustQueue[noted]("jobs"), func(ctx context.Context, n noted) error {
					if n.Note != "n" {
						t.Errorf("handler got row %d with note %q", n.ID, n.Note)
					}
					return nil
				}, inbox.Workers(4), inbox.Form(form), inbox.MaxAttempts(2), ev.Observe())
				if err != nil {
					t.Fatal(err)
				}
				inboxtest.RunSubscription(t, sub)
				ev.Wait("6 acks and a retry", func(e []inbox.Event) bool {
					return inboxtest.Count(e, inbox.Acked) == 6 && inboxtest.Count(e, inbox.Retried) == 1
				})
				inboxtest.Idle(t, sub)
				clk.Advance(time.Minute)
				evs := ev.Wait("the unreadable row parked", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Parked) == 1 })
				var last string
				if err := db.QueryRow("SELECT last_error FROM jobs").Scan(&last); err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(last, "cannot be read") || !strings.Contains(last, "note") && !strings.Contains(last, "Note") && !strings.Contains(last, "NULL") {
					t.Fatalf("last_error = %q; events %+v", last, evs)
				}
			})
		}
	})
}

// All subscriptions of a broker together hold at most the pool less one
// connection: two row-lock subscriptions on a pool of four leave handlers a
// connection to publish with.
func TestConnectionBudgetIsPerBroker(t *testing.T) {
	url := inboxtest.Postgres(t)
	b := open(t, url, inbox.MaxConns(4))
	for _, table := range []string{"jobs_a", "jobs_b", "jobs_out"} {
		if _, err := b.DB().Exec("CREATE TABLE " + table + " (LIKE jobs INCLUDING ALL)"); err != nil {
			t.Fatal(err)
		}
	}
	for _, table := range []string{"jobs_a", "jobs_b"} {
		for range 10 {
			if _, err := b.DB().Exec("INSERT INTO " + table + " (payload) VALUES ('x')"); err != nil {
				t.Fatal(err)
			}
		}
	}
	out := inbox.MustQueue[Job]("jobs_out")
	ev := inboxtest.NewEvents(t)
	for _, table := range []string{"jobs_a", "jobs_b"} {
		sub, err := inbox.Subscribe(b, inbox.MustQueue[Job](table), func(ctx context.Context, j Job) error {
			if b.DB().Stats().InUse > 4 {
				t.Errorf("pool over its size")
			}
			_, err := inbox.Publish(ctx, b, out, Job{Payload: []byte("follow-up")})
			return err
		}, inbox.Form(rowlock.Form), inbox.Workers(4), inbox.Timeout(20*time.Second), ev.Observe())
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
	}
	start := time.Now()
	evs := ev.Wait("20 handlings", func(e []inbox.Event) bool { return len(e) >= 20 })
	t.Logf("20 row-lock jobs that each publish, two subscriptions on a pool of 4: %v", time.Since(start))
	if n := inboxtest.Count(evs, inbox.Acked); n != 20 {
		t.Fatalf("%d of %d acked: %+v", n, len(evs), evs)
	}
}

// On a broker over a *pgxpool.Pool, whose sessions outlive database/sql's
// connections, an advisory run with an unreadable row among good ones
// leaves no advisory lock of the table on any session.
func TestAdvisoryLeavesNoLockOnPgxpool(t *testing.T) {
	url := inboxtest.Postgres(t)
	setup := open(t, url)
	if _, err := setup.DB().Exec("ALTER TABLE jobs ADD COLUMN note text"); err != nil {
		t.Fatal(err)
	}
	if _, err := setup.DB().Exec("INSERT INTO jobs (payload, note) VALUES ('bad', NULL), ('good', 'n')"); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	b, err := inbox.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ev := inboxtest.NewEvents(t)
	sub, err := inbox.Subscribe(b, inbox.MustQueue[noted]("jobs"), func(context.Context, noted) error { return nil },
		inbox.Form(advisory.Form), inbox.Workers(2), inbox.MaxAttempts(1), ev.Observe())
	if err != nil {
		t.Fatal(err)
	}
	stop := inboxtest.RunSubscription(t, sub)
	ev.Wait("both rows settled", func(e []inbox.Event) bool { return len(e) >= 2 })
	stop()
	var n int
	if err := setup.DB().QueryRow("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = $1::bigint::oid",
		advisory.Class("jobs")).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d advisory locks of the table left on pool sessions", n)
	}
}

// With the database clock on Postgres, publishes work, and a row-lock
// retry counts its delay from the retry, not from the claim.
func TestDatabaseClockPublishAndRowlockRetry(t *testing.T) {
	url := inboxtest.Postgres(t)
	b := open(t, url, inbox.WithClock(clock.Database{}))
	q := inbox.MustQueue[Job]("jobs")
	ctx := context.Background()
	if _, err := inbox.Publish(ctx, b, q, Job{Payload: []byte("now")}); err != nil {
		t.Fatalf("publish on the database clock: %v", err)
	}
	if _, err := inbox.Publish(ctx, b, q, Job{Payload: []byte("later")}, inbox.Delay(time.Hour)); err != nil {
		t.Fatalf("delayed publish on the database clock: %v", err)
	}
	var ahead float64
	if err := b.DB().QueryRow("SELECT extract(epoch FROM locked_until - now()) FROM jobs WHERE locked_until IS NOT NULL").Scan(&ahead); err != nil {
		t.Fatal(err)
	}
	if ahead < 3500 || ahead > 3700 {
		t.Fatalf("a publish delayed an hour is %vs ahead", ahead)
	}
	if _, err := b.DB().Exec("DELETE FROM jobs WHERE locked_until IS NOT NULL"); err != nil {
		t.Fatal(err)
	}
	settled := make(chan struct{})
	var once sync.Once // under load the retry may be handled before the stop
	sub, err := inbox.Subscribe(b, q, func(ctx context.Context, j Job) error {
		time.Sleep(1500 * time.Millisecond) // the handler's work, longer than the delay it asks for
		return inbox.RetryAfter(time.Second, nil)
	}, inbox.Form(rowlock.Form), inbox.Observe(func(inbox.Event) { once.Do(func() { close(settled) }) }))
	if err != nil {
		t.Fatal(err)
	}
	stop := inboxtest.RunSubscription(t, sub)
	<-settled
	stop()
	var left sql.NullFloat64
	if err := b.DB().QueryRow("SELECT extract(epoch FROM locked_until - clock_timestamp()) FROM jobs").Scan(&left); err != nil {
		t.Fatal(err)
	}
	if !left.Valid || left.Float64 < 0.2 {
		t.Fatalf("after a retry of one second, the row is due in %v s: the delay counted from the claim", left)
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
