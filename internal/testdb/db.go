// Package testdb gives each test a database of its own: SQLite in memory,
// a Postgres schema on the server in POSTGRES_TEST_URL or (with package
// inboxtest/containers imported) in a container, or a MariaDB/MySQL
// database on the server in MYSQL_TEST_URL. Users reach it through
// inboxtest; it lives here so the library's own internal tests, which
// inboxtest cannot serve (it imports inbox), share it.
package testdb

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// PostgresEnv is the variable that points the tests at a Postgres server.
const PostgresEnv = "POSTGRES_TEST_URL"

// MySQLEnv is the variable that points the tests at a MariaDB or MySQL
// server, as a mysql:// URL whose user may create and drop databases.
const MySQLEnv = "MYSQL_TEST_URL"

// ContainerImage is the Postgres that package inboxtest/containers starts
// (once per test binary) when PostgresEnv is unset.
const ContainerImage = "postgres:15-alpine"

// Container, when set, returns the URL of a Postgres server for tests to
// take schemas on when PostgresEnv is unset. Package inboxtest/containers
// (a module of its own, so the container's dependencies reach only those
// who import it) sets it to start one in Docker.
var Container func(t testing.TB) string

// MySQLContainerImage is the MariaDB that package inboxtest/containers
// starts (once per test binary) when MySQLEnv is unset.
const MySQLContainerImage = "mariadb:11.4"

// MySQLContainer, when set, returns the mysql:// URL of a MariaDB server
// (as a user that may create databases) for tests to take databases on when
// MySQLEnv is unset; package inboxtest/containers sets it, as Container.
var MySQLContainer func(t testing.TB) string

// SQLite returns the URL of a fresh in-memory SQLite database, named for
// this test alone, that every pool the test opens with it shares. It lives
// while any pool on it is open.
func SQLite(t testing.TB) string {
	t.Helper()
	return "sqlite://:memory:" + uniqueName(t)
}

// Postgres returns the URL of a schema of its own on the server named by
// POSTGRES_TEST_URL (the URL sets search_path to it, so unqualified names
// land there), dropped with everything in it at cleanup. Without the
// variable, a test binary that imports inboxtest/containers starts one
// Postgres (ContainerImage) in Docker and every test of the binary takes a
// schema on it; otherwise the test is skipped, saying what to set.
func Postgres(t testing.TB) string {
	t.Helper()
	base := os.Getenv(PostgresEnv)
	if base == "" && Container != nil {
		base = Container(t)
	}
	if base == "" {
		t.Skipf("%s is not set: skipping a Postgres test (set it, e.g. %s=postgres://postgres@127.0.0.1:5432/test?sslmode=disable, or import github.com/sqlinbox/sqlinbox/inboxtest/containers in a test file to start one in Docker)", PostgresEnv, PostgresEnv)
	}
	schema := "t_" + uniqueName(t)
	db, _, err := dialect.Open(base)
	if err != nil {
		t.Fatalf("inboxtest: %v", err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, "CREATE SCHEMA "+dialect.Quote(schema)); err != nil {
		t.Fatalf("inboxtest: create schema %s on %s: %v", schema, PostgresEnv, err)
	}
	t.Cleanup(func() {
		db, _, err := dialect.Open(base)
		if err != nil {
			t.Errorf("inboxtest: drop schema %s: %v", schema, err)
			return
		}
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// Sessions a test left open hold locks on the schema's tables.
		_, _ = db.ExecContext(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND query_start IS NOT NULL AND application_name = $1", schema)
		if _, err := db.ExecContext(ctx, "DROP SCHEMA "+dialect.Quote(schema)+" CASCADE"); err != nil {
			t.Errorf("inboxtest: drop schema %s: %v", schema, err)
		}
	})
	return withParams(base, "search_path", schema, "application_name", schema)
}

// MySQL returns the URL of a database of its own (t_<test>_<random>) on
// the MariaDB or MySQL server named by MYSQL_TEST_URL, dropped with
// everything in it at cleanup. Without the variable the test is skipped,
// saying what to set.
func MySQL(t testing.TB) string {
	t.Helper()
	base := os.Getenv(MySQLEnv)
	if base == "" && MySQLContainer != nil {
		base = MySQLContainer(t)
	}
	if base == "" {
		t.Skipf("%s is not set: skipping a MariaDB/MySQL test (set it, e.g. %s=mysql://root@127.0.0.1:3306/test, or import github.com/sqlinbox/sqlinbox/inboxtest/containers in a test file to start one in Docker)", MySQLEnv, MySQLEnv)
	}
	name := "t_" + uniqueName(t)
	db, d, err := dialect.Open(base)
	if err != nil {
		t.Fatalf("inboxtest: %v", err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+d.Quote(name)); err != nil {
		t.Fatalf("inboxtest: create database %s on %s: %v", name, MySQLEnv, err)
	}
	t.Cleanup(func() {
		db, d, err := dialect.Open(base)
		if err != nil {
			t.Errorf("inboxtest: drop database %s: %v", name, err)
			return
		}
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// Sessions a test left open hold locks on the database's tables,
		// and DROP DATABASE would wait for them.
		rows, err := db.QueryContext(ctx, "SELECT id FROM information_schema.processlist WHERE db = ? AND id <> CONNECTION_ID()", name)
		if err == nil {
			var ids []int64
			for rows.Next() {
				var id int64
				if rows.Scan(&id) == nil {
					ids = append(ids, id)
				}
			}
			rows.Close()
			for _, id := range ids {
				_, _ = db.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id))
			}
		}
		if _, err := db.ExecContext(ctx, "DROP DATABASE "+d.Quote(name)); err != nil {
			t.Errorf("inboxtest: drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("inboxtest: %s: %v", MySQLEnv, err)
	}
	u.Path = "/" + name
	return u.String()
}

// MySQL8 is MySQL's database, which the library takes for a MySQL 8
// server whose innodb_autoinc_lock_mode is lockMode (dialect.ForceMySQL8):
// the statements MySQL 8 runs (no RETURNING), tested on MariaDB.
func MySQL8(t testing.TB, lockMode int) string {
	t.Helper()
	u := MySQL(t)
	parsed, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	dialect.ForceMySQL8(strings.TrimPrefix(parsed.Path, "/"), lockMode)
	return u
}

// Open opens a pool on url, closed at cleanup.
func Open(t testing.TB, url string) *sql.DB {
	t.Helper()
	db, _, err := dialect.Open(url)
	if err != nil {
		t.Fatalf("inboxtest: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func withParams(raw string, kv ...string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	q := u.Query()
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// uniqueName is the test's name made an identifier, with a random suffix.
func uniqueName(t testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			return r
		case r >= 'A' && r <= 'Z':
			return r + 'a' - 'A'
		}
		return '_'
	}, t.Name())
	if len(name) > 40 {
		name = name[len(name)-40:]
	}
	return fmt.Sprintf("%s_%s", name, hex.EncodeToString(b[:]))
}

// The variables that point the pooler tests at PgBouncer (.ci/pgbouncer
// starts one): a database alias in pool_mode=transaction and one in
// pool_mode=session, both onto the server of PostgresEnv. The URLs set no
// search_path (PgBouncer refuses it at startup), so the tests name their
// tables with UniqueName in the database's default schema.
const (
	PgBouncerTxEnv      = "PGBOUNCER_TX_TEST_URL"
	PgBouncerSessionEnv = "PGBOUNCER_SESSION_TEST_URL"
)

// PgBouncer returns the URL in env (PgBouncerTxEnv or PgBouncerSessionEnv),
// or skips the test saying what to set.
func PgBouncer(t testing.TB, env string) string {
	t.Helper()
	u := os.Getenv(env)
	if u == "" {
		t.Skipf("%s is not set: skipping a test through PgBouncer (.ci/pgbouncer start prints it, e.g. %s=postgres://postgres@127.0.0.1:6432/test_tx?sslmode=disable)", env, env)
	}
	return u
}

// UniqueName is the test's name made an identifier, with a random suffix.
func UniqueName(t testing.TB) string { return uniqueName(t) }
