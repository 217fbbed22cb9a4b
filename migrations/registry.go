package migrations

import (
	"context"
	"database/sql"
	"strings"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// ApplyRegistry creates the registry's tables (instances, their
// subscriptions, per-minute counts per queue, paused queues; named in
// internal/dialect) if they do not exist, on Postgres or SQLite. Services
// that call Service.Register record themselves there, and the inbox
// command's queues, instances, pause and resume read and write them.
// Idempotent: apply it at every start.
func ApplyRegistry(ctx context.Context, db *sql.DB) error {
	return run(ctx, db, "registry.sql", strings.NewReplacer(
		"{{instances}}", dialect.RegistryInstances,
		"{{subscriptions}}", dialect.RegistrySubscriptions,
		"{{minutes}}", dialect.RegistryMinutes,
		"{{paused}}", dialect.RegistryPaused,
	))
}
