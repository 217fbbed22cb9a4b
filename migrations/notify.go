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
// wakes every instance at once instead of at its next poll. Its payload is
// empty: every subscription of the table claims once. For a table of
// several groups, ApplyGroupNotifyTrigger wakes only the groups written.
// Idempotent. On SQLite there is nothing to notify across processes: it
// returns an error saying so.
func ApplyNotifyTrigger(ctx context.Context, db *sql.DB, table string) error {
	return applyNotify(ctx, db, table, "")
}

// ApplyGroupNotifyTrigger is ApplyNotifyTrigger for a table whose
// subscriptions each take one group: the notification of an INSERT statement
// names each group it wrote (groupColumn's values), so only those groups'
// subscriptions claim. A statement that writes more than sixteen groups
// wakes every subscription of the table, as ApplyNotifyTrigger does. It
// replaces a trigger either function installed before.
func ApplyGroupNotifyTrigger(ctx context.Context, db *sql.DB, table, groupColumn string) error {
	if err := dialect.CheckIdent(groupColumn); err != nil {
		return fmt.Errorf("migrations: notify trigger on %q: group column: %w", table, err)
	}
	return applyNotify(ctx, db, table, groupColumn)
}

func applyNotify(ctx context.Context, db *sql.DB, table, groupColumn string) error {
	d, err := dialect.Detect(db)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	if !d.Notifies() {
		return fmt.Errorf("migrations: the notify trigger needs Postgres; %s has no LISTEN/NOTIFY (subscriptions there poll)", d)
	}
	if err := dialect.CheckTableName(table); err != nil {
		return fmt.Errorf("migrations: notify.sql: %w", err)
	}
	bare := table[strings.LastIndex(table, ".")+1:]
	// The channel is the table's name as subscriptions give it, and the
	// group column an identifier: both checked above, neither holds a quote.
	args, referencing := "'"+table+"'", ""
	if groupColumn != "" {
		args += ", '" + groupColumn + "'"
		referencing = "REFERENCING NEW TABLE AS sqlinbox_new\n"
	}
	return run(ctx, db, "notify.sql", strings.NewReplacer("{{table}}", dialect.Quote(table), "{{name}}", bare, "{{args}}", args, "{{referencing}}", referencing))
}
