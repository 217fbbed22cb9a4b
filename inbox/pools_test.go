package inbox_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jmoiron/sqlx"

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
