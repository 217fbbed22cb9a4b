package migrations_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sqlinbox/sqlinbox/internal/testdb"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// TestPostgresTableLeavesRoomForClaims: the reference table on Postgres
// keeps half of each page free, so a claim's update of locked_until can
// stay on its page, and applying it twice changes nothing.
func TestPostgresTableLeavesRoomForClaims(t *testing.T) {
	db := testdb.Open(t, testdb.Postgres(t))
	ctx := context.Background()
	for range 2 {
		if err := migrations.Apply(ctx, db, "room_jobs"); err != nil {
			t.Fatal(err)
		}
	}
	var opts string
	if err := db.QueryRowContext(ctx, "SELECT coalesce(array_to_string(reloptions, ','), '') FROM pg_class WHERE oid = 'room_jobs'::regclass").Scan(&opts); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(opts, "fillfactor=50") {
		t.Errorf("room_jobs has reloptions %q, want fillfactor=50", opts)
	}
}
