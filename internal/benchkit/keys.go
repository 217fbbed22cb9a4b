package benchkit

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/sqlinbox/sqlinbox/migrations"
)

// KeyRows gives every row of table a key, id modulo keys, in a column
// customer (added), and creates the limit slots' table: a drain under
// Config.Limit then limits rows in work per key.
func KeyRows(ctx context.Context, db *sql.DB, table string, keys int) error {
	if _, err := db.ExecContext(ctx, "ALTER TABLE "+table+" ADD COLUMN customer VARCHAR(64)"); err != nil {
		return fmt.Errorf("bench: add the key column to %s: %w", table, err)
	}
	if _, err := db.ExecContext(ctx, fmt.Sprintf("UPDATE %s SET customer = CAST(id %% %d AS CHAR(20))", table, keys)); err != nil {
		if _, err2 := db.ExecContext(ctx, fmt.Sprintf("UPDATE %s SET customer = CAST(id %% %d AS TEXT)", table, keys)); err2 != nil {
			return fmt.Errorf("bench: key the rows of %s: %w", table, err)
		}
	}
	if err := migrations.ApplyLimits(ctx, db); err != nil {
		return err
	}
	_, err := db.ExecContext(ctx, "DELETE FROM sqlinbox_limit_slots")
	return err
}
