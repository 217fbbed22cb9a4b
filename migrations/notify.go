package migrations

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// ApplyNotifyTrigger installs, on Postgres, the trigger that announces rows
// other programs insert into table: one NOTIFY per INSERT statement on the
// channel brokers with ListenNotify listen to, so a row written by plain SQL
// wakes every instance at once instead of at its next poll. Idempotent. On
// SQLite there is nothing to notify across processes: it returns an error
// saying so.
func ApplyNotifyTrigger(ctx context.Context, db *sql.DB, table string) error {
	d, err := dialect.Detect(db)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	if d.Kind != dialect.Postgres {
		return fmt.Errorf("migrations: the notify trigger needs Postgres; %s has no LISTEN/NOTIFY (subscriptions there poll)", d)
	}
	if err := dialect.CheckTableName(table); err != nil {
		return fmt.Errorf("migrations: notify.sql: %w", err)
	}
	bare := table[strings.LastIndex(table, ".")+1:]
	// The channel is the table's name as subscriptions give it; checked
	// above, it holds no quote.
	return run(ctx, db, "notify.sql", strings.NewReplacer("{{table}}", dialect.Quote(table), "{{name}}", bare, "{{channel}}", table))
}
