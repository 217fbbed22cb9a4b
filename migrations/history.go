package migrations

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// ApplyHistory creates the history of table (table_history), where a
// subscription with inbox.History moves acked rows: table's columns as the
// catalog has them, then handled_at (of the type of table's locked_until
// column; a lease column of another name: print the DDL the table check
// prints instead), handled_by and duration_us, with
// indexes on handled_at and on idColumn, and on keyColumn where it is not
// "" (a publish looks keys up there). table must exist. Idempotent; a
// history that exists is left as it is (a subscription's table check names
// a column it lacks).
func ApplyHistory(ctx context.Context, db *sql.DB, table, idColumn, keyColumn string) error {
	if err := dialect.CheckTableName(dialect.HistoryName(table)); err != nil {
		return fmt.Errorf("migrations: history of %q: %w", table, err)
	}
	for _, c := range []string{idColumn, keyColumn} {
		if c == "" {
			continue
		}
		if err := dialect.CheckIdent(c); err != nil {
			return fmt.Errorf("migrations: history of %q: %w", table, err)
		}
	}
	d, err := dialect.Detect(db)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	cols, err := d.Columns(ctx, db, table)
	if err != nil {
		return fmt.Errorf("migrations: history of %q: %w", table, err)
	}
	if len(cols) == 0 {
		return fmt.Errorf("migrations: history of %q: the table does not exist (Apply creates the reference table)", table)
	}
	lu := "locked_until"
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrations: history of %q: %w", table, err)
	}
	defer tx.Rollback()
	if d.Kind == dialect.Postgres {
		if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", migrationLock); err != nil {
			return fmt.Errorf("migrations: history of %q: take the migration lock: %w", table, err)
		}
	}
	for _, stmt := range d.HistoryDDL(table, cols, idColumn, lu, keyColumn) {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("migrations: history of %q: %w", table, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrations: history of %q: %w", table, err)
	}
	return nil
}
