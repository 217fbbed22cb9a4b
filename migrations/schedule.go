package migrations

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// ApplySchedules creates the tables of the schedule package (heartbeats,
// moments, shares and instances, named in internal/dialect) if they do not
// exist, and adds the columns later versions read to tables an earlier
// version made. Run it before a schedule.Scheduler starts; it is idempotent.
func ApplySchedules(ctx context.Context, db *sql.DB) error {
	err := run(ctx, db, "schedule.sql", strings.NewReplacer(
		"{{heartbeats}}", dialect.ScheduleHeartbeats,
		"{{moments}}", dialect.ScheduleMoments,
		"{{shares}}", dialect.ScheduleShares,
		"{{instances}}", dialect.ScheduleInstances,
	))
	if err != nil {
		return err
	}
	d, err := dialect.Detect(db)
	if err != nil || d.Kind != dialect.SQLite {
		return err // Postgres adds them in schedule.sql
	}
	return addColumns(ctx, db, scheduleColumns)
}

// scheduleColumns are the columns added since the first version of the
// SQLite schedule tables, as schedule.sql declares them.
var scheduleColumns = []struct{ table, column, decl string }{
	{dialect.ScheduleHeartbeats, "spec", "TEXT NOT NULL DEFAULT ''"},
	{dialect.ScheduleHeartbeats, "placement", "TEXT NOT NULL DEFAULT ''"},
	{dialect.ScheduleHeartbeats, "next_at", "TEXT"},
	{dialect.ScheduleHeartbeats, "runs", "INTEGER NOT NULL DEFAULT 0"},
	{dialect.ScheduleHeartbeats, "failures", "INTEGER NOT NULL DEFAULT 0"},
	{dialect.ScheduleHeartbeats, "last_error", "TEXT"},
	{dialect.ScheduleHeartbeats, "last_error_at", "TEXT"},
	{dialect.ScheduleShares, "done_at", "TEXT"},
	{dialect.ScheduleShares, "error", "TEXT"},
}

// addColumns adds the missing ones of cols to SQLite tables. Two processes
// adding one column at once race: the loser's "duplicate column name" means
// the column is there, as wanted.
func addColumns(ctx context.Context, db *sql.DB, cols []struct{ table, column, decl string }) error {
	for _, c := range cols {
		var n int
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM pragma_table_info(?) WHERE name = ?", c.table, c.column).Scan(&n); err != nil {
			return fmt.Errorf("migrations: sqlite schedule.sql: read the columns of %s: %w", c.table, err)
		}
		if n > 0 {
			continue
		}
		_, err := db.ExecContext(ctx, "ALTER TABLE "+dialect.Quote(c.table)+" ADD COLUMN "+c.column+" "+c.decl)
		if err != nil && !strings.Contains(err.Error(), "duplicate column name") {
			return fmt.Errorf("migrations: sqlite schedule.sql: add column %s to %s: %w", c.column, c.table, err)
		}
	}
	return nil
}
