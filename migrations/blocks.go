package migrations

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// ApplyClaimBlocks creates, on Postgres, the block sequence of table (named
// table_claim_blocks, owned by its id column idColumn; a table whose name
// is longer than 50 bytes is refused, the sequence's would not fit). Subscriptions that
// take the whole table find it when they start: while a backlog lasts, each
// claims from a block of ids no other claimer has, so many instances
// draining one table do not walk and lock each other's rows. Idempotent.
// On SQLite claims never meet (one writer at a time): it returns an error
// saying so.
func ApplyClaimBlocks(ctx context.Context, db *sql.DB, table, idColumn string) error {
	d, err := dialect.Detect(db)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	if d.Kind != dialect.Postgres {
		return fmt.Errorf("migrations: claim blocks need Postgres; on %s one claim writes at a time and claims never meet", d)
	}
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
	return run(ctx, db, "blocks.sql", strings.NewReplacer("{{table}}", dialect.Quote(table), "{{sequence}}", seq, "{{id}}", dialect.Quote(idColumn)))
}
