package inbox_test

import (
	"context"
	"database/sql"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/internal/testdb"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// Job is the reference table's row.
type Job struct {
	ID          int64          `db:"id" inbox:"id,generated"`
	LockedUntil *time.Time     `db:"locked_until" inbox:"locked_until"`
	Payload     []byte         `db:"payload" inbox:"payload"`
	Group       string         `db:"group_name" inbox:"group"`
	Attempts    int            `db:"attempts" inbox:"attempts"`
	LastError   sql.NullString `db:"last_error" inbox:"last_error"`
}

// sqlFor writes a test's statement, written with $1, $2 ... in order, in
// the placeholders of b's database: MySQL numbers none.
func sqlFor(b *inbox.Broker, q string) string {
	if b.Dialect() == "mysql" {
		return dollarN.ReplaceAllString(q, "?")
	}
	return q
}

var dollarN = regexp.MustCompile(`\$\d+`)

// quotedFor writes SQL quoted in double quotes as b's database quotes
// identifiers: MySQL in backticks.
func quotedFor(b *inbox.Broker, q string) string {
	if b.Dialect() == "mysql" {
		return strings.ReplaceAll(q, `"`, "`")
	}
	return q
}

// notOnMySQLYet skips a test on MariaDB/MySQL, naming the piece of the
// library it needs that is not built for them yet.
func notOnMySQLYet(t *testing.T, url, piece string) {
	t.Helper()
	if strings.HasPrefix(url, "mysql://") {
		t.Skipf("not on MySQL yet: %s", piece)
	}
}

// eachDB runs f on SQLite in memory and, with POSTGRES_TEST_URL, on
// Postgres, and with MYSQL_TEST_URL, on MariaDB/MySQL.
func eachDB(t *testing.T, f func(t *testing.T, url string)) {
	t.Run("sqlite", func(t *testing.T) { t.Parallel(); f(t, inboxtest.SQLite(t)) })
	t.Run("postgres", func(t *testing.T) { t.Parallel(); f(t, inboxtest.Postgres(t)) })
	t.Run("mysql", func(t *testing.T) { t.Parallel(); f(t, inboxtest.MySQL(t)) })
}

// eachPublishDB is eachDB, and MariaDB taken for MySQL 8 (testdb.MySQL8),
// whose inserts return no rows: ids from LAST_INSERT_ID, a multi-row insert
// at innodb_autoinc_lock_mode 1, one insert a row at 2.
func eachPublishDB(t *testing.T, f func(t *testing.T, url string)) {
	eachDB(t, f)
	t.Run("mysql8", func(t *testing.T) { t.Parallel(); f(t, testdb.MySQL8(t, 1)) })
	t.Run("mysql8_lockmode2", func(t *testing.T) { t.Parallel(); f(t, testdb.MySQL8(t, 2)) })
}

// open opens a broker on url with the reference table "jobs" in place.
func open(t *testing.T, url string, opts ...inbox.Option) *inbox.Broker {
	t.Helper()
	b, err := inbox.Open(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := migrations.Apply(ctx, b.DB(), "jobs"); err != nil {
		t.Fatal(err)
	}
	return b
}

// run runs sub until the test ends, failing the test if Run returns an error.
// events collects Observe events and lets a test wait for them.
// wait blocks until cond holds over the events seen, or fails the test.
// insert writes n rows by plain SQL, as a producer would.
func insert(t *testing.T, db *sql.DB, n int) {
	t.Helper()
	for i := range n {
		if _, err := db.Exec("INSERT INTO jobs (payload) VALUES ('p')"); err != nil {
			t.Fatalf("insert row %d: %v", i, err)
		}
	}
}

func rows(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRow("SELECT count(*) FROM jobs").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func fake() *clock.Fake { return clock.NewFake(epoch) }

// idle waits until sub waits on nothing but a wake or its poll.
// eventually waits for a condition the code exposes no signal for,
// checking every 10ms.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("waited 30s for %s", what)
		}
	}
}

// receiveN receives n values from ch, failing the test after 30s.
func receiveN[T any](t *testing.T, ch chan T, n int, what string) {
	t.Helper()
	for i := range n {
		select {
		case <-ch:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: %d of %d within 30s", what, i, n)
		}
	}
}
