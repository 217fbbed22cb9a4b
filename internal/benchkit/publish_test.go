package benchkit

import (
	"context"
	"testing"

	"github.com/sqlinbox/sqlinbox/internal/testdb"
)

// The MySQL floors of a publish write every row: the multi-row INSERTs and
// LOAD DATA LOCAL INFILE streamed from memory (timed counts the rows).
func TestPublishFloorsOnMySQL(t *testing.T) {
	db := testdb.Open(t, testdb.MySQL(t))
	ctx := context.Background()
	const rows = 2500 // not a whole number of batches
	if p, err := Bare(ctx, db, "", "bench_publish", rows, 1000); err != nil || p.Rows != rows {
		t.Fatalf("multi-row INSERT: %+v, %v", p, err)
	}
	if p, err := LoadData(ctx, db, "bench_publish", rows, 1000); err != nil || p.Rows != rows {
		t.Fatalf("LOAD DATA LOCAL: %+v, %v", p, err)
	}
}
