package main

import (
	"context"
	"strings"
	"testing"

	"github.com/sqlinbox/sqlinbox/internal/testdb"
)

// migrate --trigger, which its usage names, installs the notify trigger on
// Postgres and is refused on SQLite before anything is created.
func TestMigrateTrigger(t *testing.T) {
	ctx := context.Background()
	url := testdb.Postgres(t)
	inboxCmd(t, "migrate", "--db", url, "--table", "trig_jobs", "--trigger")
	db := testdb.Open(t, url)
	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM pg_trigger WHERE tgrelid = to_regclass('trig_jobs') AND NOT tgisinternal").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("migrate --trigger installed no trigger")
	}
	_, _, err := runInbox("migrate", "--db", testdb.SQLite(t), "--table", "trig_jobs", "--trigger")
	if err == nil || !strings.Contains(err.Error(), "Postgres") {
		t.Fatalf("migrate --trigger on SQLite: %v", err)
	}
}
