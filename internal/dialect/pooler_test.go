package dialect_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/internal/testdb"
)

// Each way to Postgres is told apart, on a pool the library opens and on
// one the user opened, and the time the detection adds is logged.
func TestPoolingOf(t *testing.T) {
	cases := []struct {
		name string
		url  func(t *testing.T) string
		want dialect.Pooling
	}{
		{"direct", func(t *testing.T) string { return testdb.Postgres(t) }, dialect.Direct},
		{"pgbouncer session", func(t *testing.T) string { return testdb.PgBouncer(t, testdb.PgBouncerSessionEnv) }, dialect.SessionPooled},
		{"pgbouncer transaction", func(t *testing.T) string { return testdb.PgBouncer(t, testdb.PgBouncerTxEnv) }, dialect.TransactionPooled},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			url := c.url(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()

			db, _, err := dialect.Open(url)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			start := time.Now()
			got, err := dialect.PoolingOf(ctx, db)
			took := time.Since(start)
			if err != nil || got != c.want {
				t.Fatalf("PoolingOf(Open(%s)) = %v, %v; want %v", url, got, err, c.want)
			}
			start = time.Now()
			if again, err := dialect.PoolingOf(ctx, db); err != nil || again != got {
				t.Fatalf("asked again: %v, %v", again, err)
			}
			t.Logf("Open's pool: %v found in %v (the first connection included); asked again: %v", got, took, time.Since(start))
			// Every path runs where pgx's statement cache would fail.
			for i := range 20 {
				var n int
				if err := db.QueryRowContext(ctx, "SELECT $1::int + 1", i).Scan(&n); err != nil || n != i+1 {
					t.Fatalf("statement %d on Open's pool: %d, %v", i, n, err)
				}
			}

			// The user's own pool, as pgx opens it by default.
			pool, err := pgxpool.New(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			user := stdlib.OpenDBFromPool(pool)
			defer user.Close()
			start = time.Now()
			got, err = dialect.PoolingOf(ctx, user)
			if err != nil || got != c.want {
				t.Fatalf("PoolingOf(user's pool) = %v, %v; want %v", got, err, c.want)
			}
			t.Logf("the user's pool: %v found in %v", got, time.Since(start))
			_, err = dialect.CheckPool(ctx, user, "the pool")
			if c.want == dialect.TransactionPooled {
				if !errors.Is(err, dialect.ErrTransactionPooling) {
					t.Fatalf("CheckPool of a cache_statement pool behind transaction pooling: %v", err)
				}
				t.Logf("refused: %v", err)
			} else if err != nil {
				t.Fatalf("CheckPool: %v", err)
			}
		})
	}
}

// A user's pool in cache_describe mode behind transaction pooling passes.
func TestCheckPoolAcceptsDescribeMode(t *testing.T) {
	url := testdb.PgBouncer(t, testdb.PgBouncerTxEnv)
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	p, err := dialect.CheckPool(context.Background(), db, "the pool")
	if err != nil || p != dialect.TransactionPooled {
		t.Fatalf("CheckPool = %v, %v", p, err)
	}
	var _ *sql.DB = db
}
