package main

import (
	"bytes"
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// runInbox runs the command line with args and returns what it printed on
// stdout and on stderr, and its error.
func runInbox(args ...string) (stdout, stderr string, err error) {
	var out, errOut bytes.Buffer
	root := newRoot()
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err = root.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

// inboxFails runs the command line with args, which must fail, and
// returns its error's text.
func inboxFails(t *testing.T, args ...string) string {
	t.Helper()
	out, _, err := runInbox(args...)
	if err == nil {
		t.Fatalf("inbox %s succeeded, printing:\n%s", strings.Join(args, " "), out)
	}
	return err.Error()
}

// noDDL fails when a message hands the operator DDL.
func noDDL(t *testing.T, what, msg string) {
	t.Helper()
	for _, ddl := range []string{"ALTER TABLE", "ADD COLUMN", "CREATE TABLE", "CREATE INDEX", "fix it with"} {
		if strings.Contains(msg, ddl) {
			t.Fatalf("%s prints DDL (%s):\n%s", what, ddl, msg)
		}
	}
}

// everyDB runs f on SQLite, Postgres and MariaDB/MySQL.
func everyDB(t *testing.T, f func(t *testing.T, url string)) {
	t.Run("sqlite", func(t *testing.T) { t.Parallel(); f(t, inboxtest.SQLite(t)) })
	t.Run("postgres", func(t *testing.T) { t.Parallel(); f(t, inboxtest.Postgres(t)) })
	t.Run("mysql", func(t *testing.T) { t.Parallel(); f(t, inboxtest.MySQL(t)) })
}

// renderRequest is a row of render_requests: the reference table with its
// key renamed request_id.
type renderRequest struct {
	RequestID   int64          `db:"request_id" inbox:"id,generated"`
	LockedUntil *time.Time     `db:"locked_until" inbox:"locked_until"`
	Payload     []byte         `db:"payload" inbox:"payload"`
	Group       string         `db:"group_name" inbox:"group"`
	Attempts    int            `db:"attempts" inbox:"attempts"`
	LastError   sql.NullString `db:"last_error" inbox:"last_error"`
}

// renderTable creates table as the reference table with its columns
// renamed by renames (old, new, old, new...).
func renderTable(t *testing.T, db *sql.DB, table string, renames ...string) {
	t.Helper()
	ctx := context.Background()
	if err := migrations.Apply(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(renames); i += 2 {
		if _, err := db.ExecContext(ctx, "ALTER TABLE "+table+" RENAME COLUMN "+renames[i]+" TO "+renames[i+1]); err != nil {
			t.Fatal(err)
		}
	}
}

// renderService runs a registered service that subscribes to the groups
// render and thumb of render_requests (never to the whole table).
func renderService(t *testing.T, url string) *sql.DB {
	t.Helper()
	ctx := context.Background()
	b, err := inbox.Open(url, inbox.PollInterval(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	renderTable(t, b.DB(), "render_requests", "id", "request_id")
	if err := migrations.ApplyRegistry(ctx, b.DB()); err != nil {
		t.Fatal(err)
	}
	svc := inbox.NewService("renderer", "1.0.0", b)
	svc.Signals = false
	if err := svc.Register(inbox.RegistryHeartbeat(50 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	for _, g := range []string{"render", "thumb"} {
		q := inbox.MustQueue[renderRequest]("render_requests").Group(g)
		if _, err := inbox.Handle(svc, q, func(context.Context, renderRequest) error { return nil }, inbox.Workers(1)); err != nil {
			t.Fatal(err)
		}
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(rctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	<-svc.Started()
	return b.DB()
}

// insertRow writes a row into table (whose key is key) with a literal
// locked_until (never, for a parked row), and returns its id.
func insertRow(t *testing.T, db *sql.DB, url, table, key, group, payload, lastError string, parked bool) int64 {
	t.Helper()
	lu := "NULL"
	if parked {
		switch {
		case strings.HasPrefix(url, "sqlite:"):
			lu = "'9999-12-31 00:00:00.000'"
		case strings.HasPrefix(url, "postgres"):
			lu = "'9999-12-31 00:00:00+00'"
		default:
			lu = "'9999-12-31 00:00:00'"
		}
	}
	q := "INSERT INTO " + table + " (group_name, payload, attempts, last_error, locked_until) VALUES (?, ?, 3, ?, " + lu + ")"
	if strings.HasPrefix(url, "postgres") {
		q = strings.NewReplacer("(?, ?, 3, ?,", "($1, $2, 3, $3,").Replace(q)
	}
	if _, err := db.Exec(q, group, []byte(payload), lastError); err != nil {
		t.Fatal(err)
	}
	var id int64
	if err := db.QueryRow("SELECT max(" + key + ") FROM " + table).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}
