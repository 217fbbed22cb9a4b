package migrations

import (
	"context"
	"database/sql"
	"strings"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// ApplySchedules creates the tables of the schedule package (heartbeats,
// moments, shares and instances, named in internal/dialect) if they do not exist. Run it before a
// schedule.Scheduler starts; it is idempotent.
func ApplySchedules(ctx context.Context, db *sql.DB) error {
	return run(ctx, db, "schedule.sql", strings.NewReplacer(
		"{{heartbeats}}", dialect.ScheduleHeartbeats,
		"{{moments}}", dialect.ScheduleMoments,
		"{{shares}}", dialect.ScheduleShares,
		"{{instances}}", dialect.ScheduleInstances,
	))
}
