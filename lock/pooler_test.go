package lock_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/internal/testdb"
	"github.com/sqlinbox/sqlinbox/lock"
	"github.com/sqlinbox/sqlinbox/migrations"
	"github.com/sqlinbox/sqlinbox/notify"
)

// pgbouncerBackend gives each store its own pool through PgBouncer in the
// mode of env. The pooler's URLs set no search_path: the stores share the
// lock table of the database's default schema, and each test's names are
// its own (prefixed). Behind transaction pooling each store listens for
// releases on a direct connection of its own (SQLListener), as a broker
// with inbox.ListenURL would lend it.
func pgbouncerBackend(env string) backend {
	return backend{name: "pgbouncer", open: func(t testing.TB) func(t testing.TB) lock.Store {
		u := testdb.PgBouncer(t, env)
		prefix := unique() + "/"
		store := func(t testing.TB, migrate bool) lock.Store {
			return prefixed{openPooled(t, u, migrate, env == testdb.PgBouncerTxEnv), prefix}
		}
		first := store(t, true)
		return func(t testing.TB) lock.Store {
			if first != nil {
				s := first
				first = nil
				return s
			}
			return store(t, false)
		}
	}}
}

// openPooled opens a store on u with a pool of 4 connections (the pooler's
// server connections are few) that, when listened, hears releases on a
// direct connection to POSTGRES_TEST_URL (the database the pooler's aliases
// name).
func openPooled(t testing.TB, u string, migrate, listened bool) *lock.SQL {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	db, _, err := dialect.Open(u)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(4)
	t.Cleanup(func() { db.Close() })
	if migrate {
		if err := migrations.ApplyLocks(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	opts := []lock.SQLOption{lock.SweepEvery(100 * time.Millisecond)}
	if listened {
		opts = append(opts, directListener(t))
	}
	s, err := lock.NewSQL(ctx, db, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// directListener runs a listener on a direct connection until cleanup.
func directListener(t testing.TB) lock.SQLOption {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	base := os.Getenv(testdb.PostgresEnv)
	if base == "" {
		t.Skipf("%s is not set: skipping a test whose listener connects directly", testdb.PostgresEnv)
	}
	direct, _, err := dialect.Open(base)
	if err != nil {
		t.Fatal(err)
	}
	hub := notify.NewHub()
	l := notify.NewListener(direct, hub, nil)
	l.Listen(dialect.LockChannel)
	done := make(chan struct{})
	go func() { defer close(done); _ = l.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; direct.Close() })
	select {
	case <-l.Listening(dialect.LockChannel):
	case <-time.After(30 * time.Second):
		t.Fatal("the direct listener did not listen within 30s")
	}
	return lock.SQLListener(l, hub)
}

// prefixed keeps a test's locks apart from those of the same names that
// other tests hold in the one lock table the pooler's URLs reach.
type prefixed struct {
	lock.Store
	prefix string
}

func (s prefixed) key(k lock.Key) lock.Key { k.Namespace = s.prefix + k.Namespace; return k }

func (s prefixed) Acquire(ctx context.Context, k lock.Key, secret string, ttl time.Duration, maxHolders int) (lock.Grant, error) {
	return s.Store.Acquire(ctx, s.key(k), secret, ttl, maxHolders)
}

func (s prefixed) Extend(ctx context.Context, k lock.Key, slot int, secret string, ttl time.Duration) (lock.Grant, error) {
	return s.Store.Extend(ctx, s.key(k), slot, secret, ttl)
}

func (s prefixed) Release(ctx context.Context, k lock.Key, slot int, secret string) (bool, error) {
	return s.Store.Release(ctx, s.key(k), slot, secret)
}

func (s prefixed) Subscribe(ctx context.Context, k lock.Key) (lock.Wakes, error) {
	return s.Store.Subscribe(ctx, s.key(k))
}

// The lock suite's cases of holding and handing over through PgBouncer in
// each mode, on pools the library opens. (Its cases that cancel statements
// in flight are left out: PgBouncer 1.18, Debian 12's, can crash on the
// cancel requests pgx then sends, pgbouncer/pgbouncer#801.)
func TestPgBouncer(t *testing.T) {
	cases := []struct {
		name string
		fn   func(t *testing.T, newStore func(t testing.TB) lock.Store)
	}{
		{"Mutex", testMutex},
		{"ThreeAtATime", testThreeAtATime},
		{"Extension", testExtension},
		{"FenceGrows", testFenceGrows},
		{"ReleaseName", testReleaseName},
	}
	for _, mode := range []struct{ name, env string }{{"transaction", testdb.PgBouncerTxEnv}, {"session", testdb.PgBouncerSessionEnv}} {
		t.Run(mode.name, func(t *testing.T) {
			b := pgbouncerBackend(mode.env)
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					if mode.name == "transaction" {
						t.Parallel() // session mode: one at a time, its server connections are few
					}
					tc.fn(t, b.open(t))
				})
			}
		})
	}
}

// NewSQL on a pool with pgx's statement cache behind transaction pooling
// names the pooler and the fix, not a missing table.
func TestNewSQLNamesThePooler(t *testing.T) {
	u := testdb.PgBouncer(t, testdb.PgBouncerTxEnv)
	ctx := context.Background()
	admin, _, err := dialect.Open(u)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := migrations.ApplyLocks(ctx, admin); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	s, err := lock.NewSQL(ctx, db)
	if err == nil {
		s.Close()
		t.Fatal("NewSQL took a pool with pgx's statement cache behind transaction pooling")
	}
	if !errors.Is(err, dialect.ErrTransactionPooling) || strings.Contains(err.Error(), "ApplyLocks") || !strings.Contains(err.Error(), "default_query_exec_mode=cache_describe") {
		t.Fatalf("NewSQL: %v; want the pooler and the fix named, not ApplyLocks", err)
	}
}
