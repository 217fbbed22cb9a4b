package benchkit

import (
	"context"
	"database/sql"
	"fmt"
	"os"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// Fill drops table, makes it again as the reference inbox table and writes n
// rows by plain SQL in one statement, as a producer would. It returns the
// first id; the ids run contiguously from it.
func Fill(ctx context.Context, db *sql.DB, table string, n int) (first int64, err error) {
	d, err := dialect.Detect(db)
	if err != nil {
		return 0, err
	}
	if err := dialect.CheckTableName(table); err != nil {
		return 0, err
	}
	q := d.Quote(table)
	if d.Kind == dialect.Postgres {
		Checkpoint(ctx, func(ctx context.Context, q string) error {
			_, err := db.ExecContext(ctx, q)
			return err
		})
	}
	if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+q); err != nil {
		return 0, fmt.Errorf("fill %s: %w", table, err)
	}
	if err := migrations.Apply(ctx, db, table); err != nil {
		return 0, err
	}
	var insert string
	switch d.Kind {
	case dialect.Postgres:
		insert = "INSERT INTO " + q + " (payload) SELECT '\\x7b7d'::bytea FROM generate_series(1, $1)"
	case dialect.MySQL:
		// Digits crossed, not a recursive count: MariaDB and MySQL stop a
		// recursion at 1000 steps by default (max_recursive_iterations,
		// cte_max_recursion_depth). Up to 10^7 rows.
		digits := "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)"
		from := digits + " AS a"
		for _, n := range []string{"b", "c", "e", "f", "g", "h"} {
			from += " CROSS JOIN " + digits + " AS " + n
		}
		insert = "INSERT INTO " + q + " (payload) SELECT x'7b7d' FROM " + from + " LIMIT ?"
	default:
		insert = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < ?1) INSERT INTO " + q + " (payload) SELECT x'7b7d' FROM c"
	}
	if n > 0 {
		if _, err := db.ExecContext(ctx, insert, n); err != nil {
			return 0, fmt.Errorf("fill %s with %d rows: %w", table, n, err)
		}
	}
	if d.Kind == dialect.Postgres {
		if _, err := db.ExecContext(ctx, "VACUUM ANALYZE "+q); err != nil {
			return 0, fmt.Errorf("fill %s: vacuum: %w", table, err)
		}
	} else if d.Kind == dialect.MySQL {
		if _, err := db.ExecContext(ctx, "ANALYZE TABLE "+q); err != nil {
			return 0, fmt.Errorf("fill %s: analyze: %w", table, err)
		}
	} else if _, err := db.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		return 0, fmt.Errorf("fill %s: checkpoint: %w", table, err)
	}
	var lo, hi sql.NullInt64
	var count int
	if err := db.QueryRowContext(ctx, "SELECT min(id), max(id), count(*) FROM "+q).Scan(&lo, &hi, &count); err != nil {
		return 0, fmt.Errorf("fill %s: %w", table, err)
	}
	if count != n || (n > 0 && hi.Int64-lo.Int64+1 != int64(n)) {
		return 0, fmt.Errorf("fill %s: wanted %d rows with contiguous ids, got %d rows in [%d, %d]", table, n, count, lo.Int64, hi.Int64)
	}
	return lo.Int64, nil
}

// Checkpoint starts a Postgres checkpoint cycle before a fill, so the fill
// and the drain after it fall in the same cycle: a checkpoint between them,
// or during the drain, makes each page's next change write a full page
// image, so a drain's cost would depend on where the last checkpoint fell.
// Every runner of a side-by-side gets one before its fill. Without
// the right to run it (superuser or pg_checkpoint) it says so on stderr and
// the bench goes on, with figures that vary more. exec runs a statement on
// the database.
func Checkpoint(ctx context.Context, exec func(ctx context.Context, query string) error) {
	if err := exec(ctx, "CHECKPOINT"); err != nil {
		fmt.Fprintf(os.Stderr, "bench: CHECKPOINT before the fill failed (%v); drains may meet a checkpoint and vary more: run as a superuser or a member of pg_checkpoint\n", err)
	}
}

// Remaining counts the rows left in table.
func Remaining(ctx context.Context, db *sql.DB, table string) (int64, error) {
	var n int64
	d, err := dialect.Detect(db)
	if err != nil {
		return 0, err
	}
	err = db.QueryRowContext(ctx, "SELECT count(*) FROM "+d.Quote(table)).Scan(&n)
	return n, err
}
