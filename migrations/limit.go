package migrations

import (
	"context"
	"database/sql"
	"strings"
)

// ApplyLimits creates the table of limit slots (sqlinbox_limit_slots) if it
// does not exist, on Postgres, SQLite, MariaDB or MySQL: subscriptions
// with inbox.Limit keep a row there per row in work. Idempotent: apply it at
// every start, before such a subscription runs.
func ApplyLimits(ctx context.Context, db *sql.DB) error {
	return run(ctx, db, "limit.sql", strings.NewReplacer())
}
