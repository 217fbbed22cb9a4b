package migrations

import (
	"context"
	"database/sql"
	"strings"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// ApplyRegistry creates the registry's tables (instances, their
// subscriptions, per-minute counts per queue, paused queues, placements
// set over the schedules' code, requests to cancel rows; named in
// internal/dialect) if they do not
// exist, on Postgres, SQLite, MariaDB or MySQL. Services
// that call Service.Register record themselves there, and the inbox
// command's queues, instances, pause and resume read and write them.
// Idempotent: apply it at every start.
func ApplyRegistry(ctx context.Context, db *sql.DB) error {
	err := run(ctx, db, "registry.sql", strings.NewReplacer(
		"{{instances}}", dialect.RegistryInstances,
		"{{subscriptions}}", dialect.RegistrySubscriptions,
		"{{minutes}}", dialect.RegistryMinutes,
		"{{paused}}", dialect.RegistryPaused,
		"{{placements}}", dialect.SchedulePlacements,
		"{{cancels}}", dialect.RegistryCancels,
	))
	if err != nil {
		return err
	}
	d, err := dialect.Detect(db)
	if err != nil || d.Kind == dialect.Postgres {
		return err // Postgres adds them in registry.sql
	}
	return addColumns(ctx, db, d, "registry.sql", registryColumns[d.Kind])
}

// registryColumns are the columns added since the first version of the
// registry's tables, as registry.sql declares them (SQLite; MariaDB/MySQL).
var registryColumns = map[dialect.Kind][]column{
	dialect.SQLite: {{dialect.RegistryInstances, "pickup_fallback", "TEXT NOT NULL DEFAULT ''"},
		{dialect.RegistrySubscriptions, "limit_spec", "TEXT"}},
	dialect.MySQL: {{dialect.RegistryInstances, "pickup_fallback", "VARCHAR(1024) NOT NULL DEFAULT ''"},
		{dialect.RegistrySubscriptions, "limit_spec", "TEXT NULL"}},
}
