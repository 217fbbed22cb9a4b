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
		return err // Postgres adds them in schedule.sql; MariaDB's tables have them from the first
	}
	return addColumns(ctx, db, d, "schedule.sql", scheduleColumns)
}

// scheduleColumns are the columns added since the first version of the
// SQLite schedule tables, as schedule.sql declares them.
var scheduleColumns = []column{
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

// column is one a later version added to a table, declared as its
// migration declares it.
type column struct{ table, column, decl string }

// addColumns adds the missing ones of cols to tables of file, on SQLite or
// MariaDB/MySQL (Postgres adds them in its file, with ADD COLUMN IF NOT
// EXISTS, which MySQL lacks). Two processes adding one column at once race:
// the loser's duplicate column error means the column is there, as wanted.
func addColumns(ctx context.Context, db *sql.DB, d *dialect.Dialect, file string, cols []column) error {
	for _, c := range cols {
		q := "SELECT count(*) FROM pragma_table_info(?) WHERE name = ?"
		if d.Kind == dialect.MySQL {
			q = "SELECT count(*) FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ? AND column_name = ?"
		}
		var n int
		if err := db.QueryRowContext(ctx, q, c.table, c.column).Scan(&n); err != nil {
			return fmt.Errorf("migrations: %s %s: read the columns of %s: %w", d, file, c.table, err)
		}
		if n > 0 {
			continue
		}
		_, err := db.ExecContext(ctx, "ALTER TABLE "+d.Quote(c.table)+" ADD COLUMN "+c.column+" "+c.decl)
		if err != nil && !strings.Contains(strings.ToLower(err.Error()), "duplicate column") {
			return fmt.Errorf("migrations: %s %s: add column %s to %s: %w", d, file, c.column, c.table, err)
		}
	}
	return nil
}
