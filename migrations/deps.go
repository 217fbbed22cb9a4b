package migrations

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// ApplyDependencies creates the edges of table (table_deps), which let a
// row wait for others (inbox.After): child_id and parent_id of the type of
// table's idColumn, policy and state (small integers), primary key
// (parent_id, child_id) and an index on (child_id, state). table must exist.
// Idempotent. A subscription of a table that has its edges releases the
// children of the rows it acks; a table without them runs as before, with
// no statement added.
func ApplyDependencies(ctx context.Context, db *sql.DB, table, idColumn string) error {
	if err := dialect.CheckTableName(dialect.DepsName(table)); err != nil {
		return fmt.Errorf("migrations: dependencies of %q: %w", table, err)
	}
	if err := dialect.CheckIdent(idColumn); err != nil {
		return fmt.Errorf("migrations: dependencies of %q: id column: %w", table, err)
	}
	d, err := dialect.Detect(db)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	cols, err := d.Columns(ctx, db, table)
	if err != nil {
		return fmt.Errorf("migrations: dependencies of %q: %w", table, err)
	}
	if len(cols) == 0 {
		return fmt.Errorf("migrations: dependencies of %q: the table does not exist (Apply creates the reference table)", table)
	}
	idType := ""
	for _, c := range cols {
		if c.Name == idColumn {
			idType = c.Type
		}
	}
	if idType == "" {
		return fmt.Errorf("migrations: dependencies of %q: it has no column %q: name its id column", table, idColumn)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrations: dependencies of %q: %w", table, err)
	}
	defer tx.Rollback()
	if d.Kind == dialect.Postgres {
		if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", migrationLock); err != nil {
			return fmt.Errorf("migrations: dependencies of %q: take the migration lock: %w", table, err)
		}
	}
	for _, stmt := range d.DepsDDL(table, idType) {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("migrations: dependencies of %q: %w", table, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrations: dependencies of %q: %w", table, err)
	}
	return nil
}
