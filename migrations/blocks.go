package migrations

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// ApplyClaimBlocks creates, on Postgres, the block sequence of table,
// named table_claim_blocks and owned by its id column idColumn (dropped
// with the table); migrations.Apply makes it for the reference table.
// Subscriptions of the whole table find it when they start: while a
// backlog lasts, each claims from a block of ids that, as a rule, no other
// claimer was given, so instances draining one table do not walk and lock
// each other's rows. Their role needs UPDATE on it. A table whose name is
// longer than 50 bytes is refused (the sequence's name would not fit).
// Idempotent. On SQLite, where one claim writes at a time and claims never
// meet, and on MariaDB and MySQL (no block claims yet), it does nothing.
func ApplyClaimBlocks(ctx context.Context, db *sql.DB, table, idColumn string) error {
	if err := dialect.CheckTableName(table); err != nil {
		return fmt.Errorf("migrations: blocks.sql: %w", err)
	}
	if err := dialect.CheckIdent(idColumn); err != nil {
		return fmt.Errorf("migrations: claim blocks of %q: id column: %w", table, err)
	}
	seq := dialect.BlockSequenceName(table)
	if seq == "" {
		return fmt.Errorf("migrations: claim blocks of %q: the name %s%s would be longer than %d bytes; claims of this table run without blocks (a shorter table name gets them)",
			table, table, dialect.BlockSuffix, dialect.MaxIdent)
	}
	d, err := dialect.Detect(db)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	if !d.ConcurrentWriters() {
		return nil // one claim writes at a time: claims never meet
	}
	if !d.BlockSequences() {
		return nil // claims there run without blocks
	}
	return run(ctx, db, "blocks.sql", strings.NewReplacer("{{table}}", dialect.Quote(table), "{{sequence}}", seq, "{{id}}", dialect.Quote(idColumn)))
}
