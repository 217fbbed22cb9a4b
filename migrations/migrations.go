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

//go:embed postgres/*.sql sqlite/*.sql
var files embed.FS

// Apply creates the reference inbox table (and its claim index) if it does
// not exist. table is an identifier, or schema.identifier.
func Apply(ctx context.Context, db *sql.DB, table string) error {
	return applyTable(ctx, db, "inbox.sql", table)
}

// applyTable runs one embedded file of the pool's dialect with {{table}}
// (quoted) and {{name}} (the table's bare name, for index names) filled in.
func applyTable(ctx context.Context, db *sql.DB, file, table string) error {
	if err := dialect.CheckTableName(table); err != nil {
		return fmt.Errorf("migrations: %s: %w", file, err)
	}
	bare := table[strings.LastIndex(table, ".")+1:]
	return run(ctx, db, file, strings.NewReplacer("{{table}}", dialect.Quote(table), "{{name}}", bare))
}

// run executes one embedded file of the pool's dialect, statement by
// statement (statements are separated by a line holding only "-- ;").
func run(ctx context.Context, db *sql.DB, file string, vars *strings.Replacer) error {
	d, err := dialect.Detect(db)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	text, err := files.ReadFile(d.String() + "/" + file)
	if err != nil {
		return fmt.Errorf("migrations: %s has no %s migration: %w", d, file, err)
	}
	for _, stmt := range strings.Split(vars.Replace(string(text)), "\n-- ;\n") {
		if strings.TrimSpace(stmt) == "" {
			continue
		}
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("migrations: %s %s: %w", d, file, err)
		}
	}
	return nil
}
