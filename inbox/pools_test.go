package inbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jmoiron/sqlx"

	"github.com/sqlinbox/sqlinbox/claim/advisory"
	"github.com/sqlinbox/sqlinbox/claim/rowlock"
	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// A broker runs on a pool the caller already has: *pgxpool.Pool, *sqlx.DB
// or *sql.DB; it sizes its claims to that pool and leaves it open.
func TestBrokerOnCallersPool(t *testing.T) {
	ctx := context.Background()
	drain := func(t *testing.T, b *inbox.Broker, ping func() error) {
		t.Helper()
		if err := migrations.Apply(ctx, b.DB(), "jobs"); err != nil {
			t.Fatal(err)
		}
		insert(t, b.DB(), 20)
		ev := inboxtest.NewEvents(t)
		sub, err := inbox.Subscribe(b, inbox.MustQueue[Job]("jobs"), func(context.Context, Job) error { return nil },
			inbox.Workers(4), ev.Observe())
		if err != nil {
			t.Fatal(err)
		}
		stop := inboxtest.RunSubscription(t, sub)
		ev.Wait("20 acks", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Acked) == 20 })
		stop()
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		if err := ping(); err != nil {
			t.Fatalf("closing the broker closed the caller's pool: %v", err)
		}
	}
	t.Run("pgxpool", func(t *testing.T) {
		cfg, err := pgxpool.ParseConfig(inboxtest.Postgres(t))
		if err != nil {
			t.Fatal(err)
		}
		cfg.MaxConns = 3
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		b, err := inbox.New(pool)
		if err != nil {
			t.Fatal(err)
		}
		if got := b.DB().Stats().MaxOpenConnections; got != 3 {
			t.Fatalf("pool size seen as %d, want the pgxpool's 3", got)
		}
		drain(t, b, func() error { return pool.Ping(ctx) })
	})
	t.Run("sqlx", func(t *testing.T) {
		db := inboxtest.Open(t, inboxtest.SQLite(t))
		b, err := inbox.New(sqlx.NewDb(db, "sqlite"))
		if err != nil {
			t.Fatal(err)
		}
		drain(t, b, func() error { return db.PingContext(ctx) })
	})
	t.Run("wrong type", func(t *testing.T) {
		if _, err := inbox.New("postgres://x"); err == nil {
			t.Fatal("a string was taken as a pool")
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
