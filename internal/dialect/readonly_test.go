package dialect_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// A pool whose sessions are read-only (a standby, a demoted primary) gets
// its write refused as 25006, which the dialect takes for a dead
// connection; the connection is dropped, so the next statement runs on a
// new one, not on the read-only session again.
func TestReadOnlySessionDropped(t *testing.T) {
	u := os.Getenv("POSTGRES_TEST_URL")
	if u == "" {
		t.Skip("POSTGRES_TEST_URL is not set")
	}
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	db, d, err := dialect.Open(u + sep + "options=-c%20default_transaction_read_only%3Don")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	var before, after int
	if err := db.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&before); err != nil {
		t.Fatal(err)
	}
	_, err = db.ExecContext(ctx, "CREATE TEMP TABLE readonly_probe (id int)")
	if err == nil {
		t.Fatal("a write on a read-only session succeeded")
	}
	t.Logf("the write on a read-only session: %v", err)
	if !d.Unreachable(err) || !d.DeadConn(err) {
		t.Fatalf("read-only refusal %v: Unreachable %v, DeadConn %v, want both", err, d.Unreachable(err), d.DeadConn(err))
	}
	if err := db.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&after); err != nil {
		t.Fatalf("the statement after the read-only refusal: %v", err)
	}
	if after == before {
		t.Fatalf("the read-only session (pid %d) stayed in the pool", before)
	}
}
