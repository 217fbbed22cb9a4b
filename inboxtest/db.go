// Package inboxtest is the kit for testing services built on sqlinbox: a
// database of its own per test (SQLite in memory, or a Postgres schema),
// services run for the test's life on a fake clock the test advances,
// waits on the queue instead of on time, and a recorder of handlings that
// asserts each row was handled once and never by two holders at once.
//
//	func TestRender(t *testing.T) {
//		b := inboxtest.NewBroker(t, inboxtest.SQLite(t)) // or inboxtest.Postgres(t)
//		rec := inboxtest.NewRecorder(t, b, queue)
//		svc := newService(b, rec.Wrap("a", render), rec.Observe("a"))
//		run := inboxtest.Start(t, svc)
//		...
//		rec.WaitDrained()
//		rec.ExactlyOnce(ids...)
//	}
package inboxtest

import (
	"database/sql"
	"testing"

	"github.com/sqlinbox/sqlinbox/internal/testdb"
)

// PostgresEnv is the variable that points the tests at a Postgres server.
const PostgresEnv = testdb.PostgresEnv

// ContainerImage is the Postgres that test binaries importing
// inboxtest/containers start (once each) when PostgresEnv is unset.
const ContainerImage = testdb.ContainerImage

// SQLite returns the URL of a fresh in-memory SQLite database, named for
// this test alone, that every pool the test opens with it shares. It lives
// while any pool on it is open.
func SQLite(t testing.TB) string {
	t.Helper()
	return testdb.SQLite(t)
}

// Postgres returns the URL of a schema of its own on the server named by
// POSTGRES_TEST_URL (the URL sets search_path to it, so unqualified names
// land there), dropped with everything in it at cleanup. Without the
// variable, a test binary that imports inboxtest/containers (a module of its
// own: go get github.com/sqlinbox/sqlinbox/inboxtest/containers) starts one
// Postgres (ContainerImage) in Docker and every test of the binary takes a
// schema on it; otherwise the test is skipped, saying what to set.
func Postgres(t testing.TB) string {
	t.Helper()
	return testdb.Postgres(t)
}

// MySQLEnv is the variable that points the tests at a MariaDB or MySQL
// server.
const MySQLEnv = testdb.MySQLEnv

// MySQLContainerImage is the MariaDB that test binaries importing
// inboxtest/containers start (once each) when MySQLEnv is unset.
const MySQLContainerImage = testdb.MySQLContainerImage

// MySQL returns the URL of a database of its own on the MariaDB or MySQL
// server named by MYSQL_TEST_URL (a mysql:// URL whose user may create
// databases), dropped with everything in it at cleanup. Without the
// variable, a test binary that imports inboxtest/containers starts one
// MariaDB (MySQLContainerImage) in Docker and every test of the binary
// takes a database on it; otherwise the test is skipped, saying what to
// set.
func MySQL(t testing.TB) string {
	t.Helper()
	return testdb.MySQL(t)
}

// Open opens a pool on url, closed at cleanup.
func Open(t testing.TB, url string) *sql.DB {
	t.Helper()
	return testdb.Open(t, url)
}
