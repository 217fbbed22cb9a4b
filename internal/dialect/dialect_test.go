package dialect_test

import (
	"context"
	"database/sql"
	"os"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/internal/testdb"
)

func TestCheckTableName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"invoice_jobs", true},
		{"app.invoice_jobs", true},
		{"_x9", true},
		{"", false},
		{"9jobs", false},
		{"invoice_jobs; DROP TABLE x", false},
		{`jobs"`, false},
		{"a.b.c", false},
		{"jobs-1", false},
		{string(make([]byte, 64)), false},
	} {
		err := dialect.CheckTableName(tc.name)
		if (err == nil) != tc.ok {
			t.Errorf("CheckTableName(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
	if got := dialect.Quote("app.jobs"); got != `"app"."jobs"` {
		t.Errorf("Quote = %s", got)
	}
}

func TestRebind(t *testing.T) {
	q := "SELECT $1, $12 WHERE x = $1"
	if got := dialect.Of(dialect.SQLite).Rebind(q); got != "SELECT ?1, ?12 WHERE x = ?1" {
		t.Errorf("sqlite rebind = %q", got)
	}
	if got := dialect.Of(dialect.Postgres).Rebind(q); got != q {
		t.Errorf("postgres rebind changed the query: %q", got)
	}
}

func TestSQLiteURLs(t *testing.T) {
	for _, tc := range []struct{ url, prefix string }{
		{"sqlite:///var/lib/app/jobs.db", "file:/var/lib/app/jobs.db?"},
		{"sqlite://jobs.db", "file:jobs.db?"},
		{"sqlite://:memory:shop", "file:/shop?"},
		{"sqlite://:memory:", "file:/sqlinbox-"},
	} {
		dsn, err := dialect.SQLiteDSN(tc.url)
		if err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		if len(dsn) < len(tc.prefix) || dsn[:len(tc.prefix)] != tc.prefix {
			t.Errorf("%s -> %s, want prefix %s", tc.url, dsn, tc.prefix)
		}
	}
	if _, err := dialect.SQLiteDSN("sqlite://"); err == nil {
		t.Error("empty sqlite URL accepted")
	}
	if _, _, err := dialect.Open("mysql://x"); err == nil {
		t.Error("mysql URL accepted")
	}
}

// Every connection of a pool opened from a URL has its page cache bounded,
// file or memory, and a URL that sets cache_size keeps its own.
func TestSQLiteCacheSize(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for _, tc := range []struct {
		url  string
		want int64
	}{
		{"sqlite://" + dir + "/a.db", -dialect.SQLiteCacheKiB},
		{"sqlite://:memory:", -dialect.SQLiteCacheKiB},
		{"sqlite://" + dir + "/b.db?_pragma=cache_size(-64)", -64},
		{"sqlite://" + dir + "/c.db?_pragma=main.CACHE_SIZE%3D300", 300},
	} {
		db, _, err := dialect.Open(tc.url)
		if err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		// Two connections held at once, so the second is a fresh one.
		conns := make([]*sql.Conn, 2)
		for i := range conns {
			if conns[i], err = db.Conn(ctx); err != nil {
				t.Fatalf("%s: %v", tc.url, err)
			}
			var got int64
			if err := conns[i].QueryRowContext(ctx, "PRAGMA cache_size").Scan(&got); err != nil {
				t.Fatalf("%s: %v", tc.url, err)
			}
			if got != tc.want {
				t.Errorf("%s: connection %d: cache_size = %d, want %d", tc.url, i, got, tc.want)
			}
		}
		for _, c := range conns {
			c.Close()
		}
		db.Close()
	}
}

// The database clock's SQL must write what the host encoding writes, so a
// fence compares equal whichever clock wrote it.
func TestDatabaseTimesRoundTrip(t *testing.T) {
	ctx := context.Background()
	check := func(t *testing.T, db *sql.DB, d *dialect.Dialect, enc dialect.Encoding) {
		tm := dialect.Times{Kind: d.Kind, Encoding: enc, InDatabase: true}
		var raw any
		before := time.Now().Add(time.Minute - time.Second)
		if err := db.QueryRowContext(ctx, d.Rebind("SELECT "+tm.At(1)), tm.Arg(time.Time{}, time.Minute)).Scan(&raw); err != nil {
			t.Fatal(err)
		}
		at, ok, err := tm.Decode(raw)
		if err != nil || !ok {
			t.Fatalf("decode %v: %v", raw, err)
		}
		if at.Before(before) || at.After(before.Add(5*time.Second)) {
			t.Fatalf("database now+1m = %v, host says about %v", at, before)
		}
		host := dialect.Times{Kind: d.Kind, Encoding: enc}
		if enc != dialect.Timestamptz && host.Encode(at) != raw && host.Encode(at) != at {
			t.Fatalf("re-encoded %v as %v, database wrote %v", at, host.Encode(at), raw)
		}
	}
	t.Run("sqlite", func(t *testing.T) {
		db, d, err := dialect.Open("sqlite://:memory:")
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		check(t, db, d, dialect.Text)
		check(t, db, d, dialect.UnixMillis)
	})
	t.Run("postgres", func(t *testing.T) {
		u := os.Getenv("POSTGRES_TEST_URL")
		if u == "" {
			t.Skip("POSTGRES_TEST_URL is not set: skipping the Postgres half")
		}
		db, d, err := dialect.Open(u)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		check(t, db, d, dialect.Timestamptz)
	})
	t.Run("mysql", func(t *testing.T) {
		db, d, err := dialect.Open(testdb.MySQL(t))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		check(t, db, d, dialect.Datetime)
		// A time written by the host clock reads back equal, and a fence
		// on it matches.
		if _, err := db.ExecContext(ctx, "CREATE TABLE fence (id BIGINT PRIMARY KEY, locked_until DATETIME(6) NULL) ENGINE=InnoDB"); err != nil {
			t.Fatal(err)
		}
		tm := dialect.Times{Kind: d.Kind, Encoding: dialect.EncodingFor(d.Kind, "datetime(6)")}
		at := time.Now().In(time.FixedZone("far", 5*3600))
		if _, err := db.ExecContext(ctx, "INSERT INTO fence VALUES (1, ?)", tm.Encode(at)); err != nil {
			t.Fatal(err)
		}
		var n int
		var back time.Time
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*), MAX(locked_until) FROM fence WHERE locked_until = ?", tm.Encode(at)).Scan(&n, &back); err != nil || n != 1 {
			t.Fatalf("fence on %v matched %d rows: %v", tm.Encode(at), n, err)
		}
		if !back.Equal(at.Truncate(time.Microsecond)) {
			t.Errorf("wrote %v, read back %v", at, back)
		}
	})
}
