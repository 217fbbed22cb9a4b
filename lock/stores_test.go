package lock_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/internal/testdb"
	"github.com/sqlinbox/sqlinbox/lock"
	"github.com/sqlinbox/sqlinbox/migrations"
	"github.com/sqlinbox/sqlinbox/notify"
)

func TestMemory(t *testing.T) { runSuite(t, memoryBackend) }
func TestSQLite(t *testing.T) { runSuite(t, sqliteBackend) }
func TestPostgres(t *testing.T) {
	if os.Getenv("POSTGRES_TEST_URL") == "" {
		t.Skip("POSTGRES_TEST_URL is not set: skipping the Postgres lock store")
	}
	runSuite(t, postgresBackend)
}

func TestMySQL(t *testing.T) {
	if os.Getenv(testdb.MySQLEnv) == "" {
		t.Skipf("%s is not set: skipping the MariaDB/MySQL lock store", testdb.MySQLEnv)
	}
	runSuite(t, mysqlBackend)
}

// mysqlBackend runs each test in a database of its own and gives each store
// its own pool on it.
var mysqlBackend = backend{name: "mysql", open: func(t testing.TB) func(t testing.TB) lock.Store {
	u := testdb.MySQL(t)
	first := openSQL(t, u, true)
	return func(t testing.TB) lock.Store {
		if first != nil {
			s := first
			first = nil
			return s
		}
		return openSQL(t, u, false)
	}
}, proxied: func(t testing.TB) (lock.Store, lock.Store, *proxy) {
	u := testdb.MySQL(t)
	direct := openSQL(t, u, true)
	cut, p := postgresProxied(t, u)
	return direct, cut, p
}}

func unique() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// memoryBackend shares one Memory between every "store" of a test: within a
// process that is what sharing a memory store means.
var memoryBackend = backend{name: "memory", open: func(t testing.TB) func(t testing.TB) lock.Store {
	m := lock.NewMemory(nil)
	return func(testing.TB) lock.Store { return m }
}}

// sqliteBackend gives each store its own pool over one in-memory database.
var sqliteBackend = backend{name: "sqlite", open: func(t testing.TB) func(t testing.TB) lock.Store {
	u := "sqlite://:memory:locks_" + unique()
	first := openSQL(t, u, true)
	return func(t testing.TB) lock.Store {
		if first != nil {
			s := first
			first = nil
			return s
		}
		return openSQL(t, u, false)
	}
}}

// postgresBackend runs each test in a schema of its own and gives each store
// its own pool on it.
var postgresBackend = backend{name: "postgres", open: func(t testing.TB) func(t testing.TB) lock.Store {
	u := postgresSchema(t)
	first := openSQL(t, u, true)
	return func(t testing.TB) lock.Store {
		if first != nil {
			s := first
			first = nil
			return s
		}
		return openSQL(t, u, false)
	}
}, proxied: func(t testing.TB) (lock.Store, lock.Store, *proxy) {
	u := postgresSchema(t)
	direct := openSQL(t, u, true)
	cut, p := postgresProxied(t, u)
	return direct, cut, p
}}

// postgresProxied opens a store on the test's schema (or MariaDB database)
// through a proxy the test can cut.
func postgresProxied(t testing.TB, u string) (lock.Store, *proxy) {
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	p := newProxy(t, pu.Host)
	pu.Host = p.addr()
	return openSQL(t, pu.String(), false), p
}

// postgresSchema creates a schema for the test, drops it at cleanup, and
// returns a URL whose connections use it.
func postgresSchema(t testing.TB) string {
	t.Helper()
	base := os.Getenv("POSTGRES_TEST_URL")
	if base == "" {
		t.Skip("POSTGRES_TEST_URL is not set: skipping a Postgres test")
	}
	schema := "lock_" + unique()
	admin, _, err := dialect.Open(base)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec("CREATE SCHEMA " + schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer admin.Close()
		if _, err := admin.Exec("DROP SCHEMA " + schema + " CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	pu, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := pu.Query()
	q.Set("search_path", schema)
	pu.RawQuery = q.Encode()
	return pu.String()
}

func openSQL(t testing.TB, u string, migrate bool) *lock.SQL {
	t.Helper()
	db, _, err := dialect.Open(u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	if migrate {
		if err := migrations.ApplyLocks(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	s, err := lock.NewSQL(ctx, db, lock.SweepEvery(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestNewSQLWithoutTable(t *testing.T) {
	db, _, err := dialect.Open("sqlite://:memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, err = lock.NewSQL(context.Background(), db)
	if err == nil || !strings.Contains(err.Error(), "migrations.ApplyLocks") {
		t.Fatalf("NewSQL on a database without the table: %v", err)
	}
}

// NewSQL on a Postgres that does not answer says the database is
// unreachable, not that the table is missing.
func TestNewSQLUnreachable(t *testing.T) {
	db, _, err := dialect.Open("postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, err = lock.NewSQL(context.Background(), db)
	if err == nil || !strings.Contains(err.Error(), "database is unreachable") || strings.Contains(err.Error(), "ApplyLocks") {
		t.Fatalf("NewSQL on an unreachable Postgres: %v", err)
	}
	t.Log(err)
}

func TestRedis(t *testing.T) {
	if os.Getenv("REDIS_TEST_URL") == "" {
		t.Skip("REDIS_TEST_URL is not set: skipping the Redis lock store")
	}
	runSuite(t, redisBackend)
}

// redisBackend gives each test a key prefix of its own and each store a
// client of its own.
var redisBackend = backend{name: "redis", open: func(t testing.TB) func(t testing.TB) lock.Store {
	prefix := "test:" + unique() + ":"
	t.Cleanup(func() { redisCleanup(t, prefix) })
	return func(t testing.TB) lock.Store { return openRedis(t, prefix) }
}, proxied: func(t testing.TB) (lock.Store, lock.Store, *proxy) {
	prefix := "test:" + unique() + ":"
	t.Cleanup(func() { redisCleanup(t, prefix) })
	direct := openRedis(t, prefix)
	opt, err := redis.ParseURL(os.Getenv("REDIS_TEST_URL"))
	if err != nil {
		t.Fatal(err)
	}
	p := newProxy(t, opt.Addr)
	opt.Addr = p.addr()
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	s, err := lock.NewRedis(context.Background(), c, lock.RedisPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return direct, s, p
}}

func redisClient(t testing.TB) *redis.Client {
	t.Helper()
	u := os.Getenv("REDIS_TEST_URL")
	if u == "" {
		t.Skip("REDIS_TEST_URL is not set: skipping a Redis test")
	}
	opt, err := redis.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return c
}

func openRedis(t testing.TB, prefix string) *lock.Redis {
	t.Helper()
	s, err := lock.NewRedis(context.Background(), redisClient(t), lock.RedisPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func redisCleanup(t testing.TB, prefix string) {
	c := redisClient(t)
	ctx := context.Background()
	keys, err := c.Keys(ctx, prefix+"*").Result()
	if err == nil && len(keys) > 0 {
		err = c.Del(ctx, keys...).Err()
	}
	if err != nil {
		t.Errorf("redis cleanup of %s*: %v", prefix, err)
	}
}

func TestRedisUnreachable(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	if _, err := lock.NewRedis(context.Background(), c); err == nil {
		t.Fatal("NewRedis on an unreachable server succeeded")
	}
}

// A store that cannot be reached fails the call with the cause and never
// answers a hold.
func TestUnreachableStoreFails(t *testing.T) {
	db, _, err := dialect.Open("sqlite://:memory:")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := migrations.ApplyLocks(ctx, db); err != nil {
		t.Fatal(err)
	}
	s, err := lock.NewSQL(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := locker(t, s, "down")
	db.Close()
	h, ok, err := l.Take(ctx, "k", lock.Wait(time.Second))
	if ok || err == nil || !strings.Contains(err.Error(), `lock "down/k": acquire`) {
		t.Fatalf("take on a closed pool: ok=%v hold=%+v err=%v", ok, h, err)
	}
	t.Log(err)
}

// On Postgres a store can listen on a listener it is given (a broker's):
// a release on another pool wakes its waiter through it.
func TestPostgresSharedListener(t *testing.T) {
	u := postgresSchema(t)
	holderStore := openSQL(t, u, true)
	db, _, err := dialect.Open(u)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hub := notify.NewHub()
	listener := notify.NewListener(db, hub, nil)
	listened := make(chan struct{})
	go func() { defer close(listened); listener.Run(ctx) }()
	defer func() { cancel(); <-listened }()
	waiterStore, err := lock.NewSQL(ctx, db, lock.SQLListener(listener, hub))
	if err != nil {
		t.Fatal(err)
	}
	defer waiterStore.Close()
	select {
	case <-listener.Ready():
	case <-ctx.Done():
		t.Fatal("listener not ready")
	}
	tried := make(chan struct{}, 10)
	holder, waiter := locker(t, holderStore, "shared"), locker(t, &observed{waiterStore, tried, nil}, "shared")
	h := mustTake(t, holder, "k", lock.TTL(time.Minute))
	got := make(chan time.Time, 1)
	go func() {
		_, ok, err := waiter.Take(ctx, "k", lock.Wait(time.Minute), lock.RetryDelay(time.Minute))
		if !ok || err != nil {
			t.Errorf("waiter: ok=%v err=%v", ok, err)
		}
		got <- time.Now()
	}()
	<-tried // the waiter found the place held: only a wake hands it over within its minute
	at := time.Now()
	if err := holder.Release(ctx, h.Token); err != nil {
		t.Fatal(err)
	}
	select {
	case done := <-got:
		t.Logf("release to waiter through a shared listener: %v", done.Sub(at))
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter was not woken by the release")
	}
	if _, err := lock.NewSQL(ctx, db, lock.SQLListener(listener, nil)); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("listener without hub: %v", err)
	}
}

// observed signals each failed Acquire of the store it wraps, and each
// error on errs when it is set.
type observed struct {
	lock.Store
	failed chan struct{}
	errs   chan error
}

func (o *observed) Acquire(ctx context.Context, k lock.Key, secret string, ttl time.Duration, n int) (lock.Grant, error) {
	g, err := o.Store.Acquire(ctx, k, secret, ttl, n)
	if err == nil && !g.Acquired {
		select {
		case o.failed <- struct{}{}:
		default:
		}
	}
	if err != nil && o.errs != nil {
		select {
		case o.errs <- err:
		default:
		}
	}
	return g, err
}

// oldLockTable makes, in a schema of its own, the lock table of an earlier
// version (a fence counter row per name, released rows kept) holding rows,
// then opens the store on it, which upgrades it in place.
func oldLockTable(t *testing.T, rows string) (*sql.DB, lock.Store) {
	t.Helper()
	u := postgresSchema(t)
	db, _, err := dialect.Open(u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	for _, q := range []string{
		`CREATE TABLE sqlinbox_locks (namespace text NOT NULL, name text NOT NULL, slot integer NOT NULL CHECK (slot >= -1),
			token text NOT NULL DEFAULT '', fence bigint NOT NULL, expires_at timestamptz NOT NULL, PRIMARY KEY (namespace, name, slot))`,
		`INSERT INTO sqlinbox_locks VALUES ` + rows,
	} {
		if _, err := db.ExecContext(ctxT(t), q); err != nil {
			t.Fatal(err)
		}
	}
	return db, openSQL(t, u, true)
}

// An old table upgrades in place: its leftovers go, and a name taken again
// gets a fence above every fence it had.
func TestPostgresUpgradeKeepsFencesGrowing(t *testing.T) {
	db, s := oldLockTable(t, `('up', 'order:1', -1, '', 41, 'infinity'), ('up', 'order:1', 0, '', 41, '-infinity'),
		('up', 'order:2', -1, '', 7, 'infinity'), ('up', 'order:2', 0, 'x', 7, now() + interval '1 hour')`)
	var rows int
	if err := db.QueryRowContext(ctxT(t), "SELECT COUNT(*) FROM sqlinbox_locks").Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("after the upgrade %d rows (err %v), want the one live hold", rows, err)
	}
	h := mustTake(t, locker(t, s, "up"), "order:1")
	if h.Fence <= 41 {
		t.Fatalf("fence %d after the upgrade, not above the name's 41", h.Fence)
	}
}

// An old table whose greatest fence is 1, still held: the new sequence,
// never drawn from, must not hand out 1 again.
func TestPostgresUpgradeFromFenceOne(t *testing.T) {
	_, s := oldLockTable(t, `('up', 'order:1', 0, 'x', 1, now() + interval '1 hour')`)
	h := mustTake(t, locker(t, s, "up"), "order:2")
	if h.Fence <= 1 {
		t.Fatalf("fence %d after the upgrade, not above the table's 1", h.Fence)
	}
}
