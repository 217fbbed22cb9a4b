package migrations

import (
	"context"
	"database/sql"
	"strings"
)

// ApplyLocks creates the lock store's table (sqlinbox_locks) if it does not
// exist, on Postgres, SQLite, MariaDB or MySQL. Apply it at every start,
// before lock.NewSQL.
func ApplyLocks(ctx context.Context, db *sql.DB) error {
	return run(ctx, db, "lock.sql", strings.NewReplacer())
}
