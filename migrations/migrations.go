// Package migrations holds the SQL the library's tables are made of, per
// dialect, embedded in the binary, and applies it. Every migration is
// idempotent: apply it at every start.
//
//	err := migrations.Apply(ctx, db, "invoice_jobs") // the reference inbox table
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"strings"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

//go:embed postgres/*.sql sqlite/*.sql mysql/*.sql
var files embed.FS

// Apply creates the reference inbox table (and its claim index) if it does
// not exist, and on Postgres its block sequence (see ApplyClaimBlocks; none
// for a table name longer than 50 bytes). table is an identifier, or
// schema.identifier (database.identifier on MariaDB and MySQL).
func Apply(ctx context.Context, db *sql.DB, table string) error {
	if err := applyTable(ctx, db, "inbox.sql", table); err != nil {
		return err
	}
	if dialect.BlockSequenceName(table) == "" {
		return nil
	}
	return ApplyClaimBlocks(ctx, db, table, "id")
}

// applyTable runs one embedded file of the pool's dialect with {{table}}
// (quoted) and {{name}} (the table's bare name, for index names) filled in.
func applyTable(ctx context.Context, db *sql.DB, file, table string) error {
	if err := dialect.CheckTableName(table); err != nil {
		return fmt.Errorf("migrations: %s: %w", file, err)
	}
	d, err := dialect.Detect(db)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	bare := table[strings.LastIndex(table, ".")+1:]
	return runAs(ctx, db, d, file, strings.NewReplacer("{{table}}", d.Quote(table), "{{name}}", bare))
}

// run executes one embedded file of the pool's dialect, statement by
// statement (statements are separated by a line holding only "-- ;").
func run(ctx context.Context, db *sql.DB, file string, vars *strings.Replacer) error {
	d, err := dialect.Detect(db)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	return runAs(ctx, db, d, file, vars)
}

// runAs is run on a pool of dialect d. On MariaDB and MySQL each DDL
// statement commits by itself, and CREATE TABLE IF NOT EXISTS is safe
// against a concurrent create there (it waits on the table's metadata
// lock), so the transaction orders nothing but is harmless.
func runAs(ctx context.Context, db *sql.DB, d *dialect.Dialect, file string, vars *strings.Replacer) error {
	text, err := files.ReadFile(d.String() + "/" + file)
	if err != nil {
		return fmt.Errorf("migrations: %s has no %s migration: %w", d, file, err)
	}
	// One transaction, and on Postgres one lock, so instances that start
	// together and all apply the same migration wait for each other instead
	// of racing on the catalog (CREATE ... IF NOT EXISTS is not safe against
	// a concurrent create). SQLite's BEGIN IMMEDIATE serializes by itself.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrations: %s %s: %w", d, file, err)
	}
	defer tx.Rollback()
	if d.Kind == dialect.Postgres {
		if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", migrationLock); err != nil {
			return fmt.Errorf("migrations: %s %s: take the migration lock: %w", d, file, err)
		}
	}
	for _, stmt := range strings.Split(vars.Replace(string(text)), "\n-- ;\n") {
		if strings.TrimSpace(stmt) == "" {
			continue
		}
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("migrations: %s %s: %w", d, file, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrations: %s %s: %w", d, file, err)
	}
	return nil
}

// migrationLock is the advisory lock key every migration takes on Postgres.
const migrationLock int64 = 0x73716c696e626f78 // "sqlinbox"
