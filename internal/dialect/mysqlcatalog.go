package dialect

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strings"
)

// The MariaDB/MySQL catalog, read from information_schema. A table name
// is table (in the connection's database) or database.table.

// mysqlSchema is the condition on table_schema and table_name of table,
// and its arguments.
func mysqlSchema(table string) (string, []any) {
	if s, n, ok := strings.Cut(table, "."); ok {
		return "table_schema = ? AND table_name = ?", []any{s, n}
	}
	return "table_schema = DATABASE() AND table_name = ?", []any{table}
}

// intWidth is the display width MariaDB (and MySQL before 8.0.19) writes
// after an integer type: bigint(20) is a bigint.
var intWidth = regexp.MustCompile(`^(tinyint|smallint|mediumint|int|bigint)\(\d+\)`)

// mysqlColumnsQuery reads the columns of table as Columns scans them.
func mysqlColumnsQuery(table string) (string, []any) {
	where, args := mysqlSchema(table)
	return `SELECT column_name, column_type, column_key = 'PRI', is_nullable = 'NO', COALESCE(column_default, '')
FROM information_schema.columns WHERE ` + where + ` ORDER BY ordinal_position`, args
}

// mysqlColumn writes a column as the other catalogs do: integer types
// without their display width, and no default for a nullable column that
// has none (MariaDB writes it NULL).
func mysqlColumn(c *Column) {
	c.Type = intWidth.ReplaceAllString(c.Type, "$1")
	if c.Default == "NULL" && !c.NotNull {
		c.Default = ""
	}
}

func mysqlIndexes(ctx context.Context, db Querier, table string) ([]Index, error) {
	where, args := mysqlSchema(table)
	rows, err := db.QueryContext(ctx, `SELECT index_name, column_name FROM information_schema.statistics
WHERE `+where+` ORDER BY index_name, seq_in_index`, args...)
	if err != nil {
		return nil, fmt.Errorf("read the indexes of %q: %w", table, err)
	}
	defer rows.Close()
	var out []Index
	for rows.Next() {
		var name string
		var col sql.NullString // NULL for a functional key part (MySQL 8)
		if err := rows.Scan(&name, &col); err != nil {
			return nil, err
		}
		if len(out) == 0 || out[len(out)-1].Name != name {
			out = append(out, Index{Name: name})
		}
		out[len(out)-1].Columns = append(out[len(out)-1].Columns, col.String)
	}
	return out, rows.Err()
}

// Engine reads the storage engine of a MariaDB/MySQL table ("InnoDB"); ""
// elsewhere, or for no such table.
func (d *Dialect) Engine(ctx context.Context, db Querier, table string) (string, error) {
	if d.Kind != MySQL {
		return "", nil
	}
	where, args := mysqlSchema(table)
	rows, err := db.QueryContext(ctx, "SELECT COALESCE(engine, '') FROM information_schema.tables WHERE "+where, args...)
	if err != nil {
		return "", fmt.Errorf("read the engine of %q: %w", table, err)
	}
	defer rows.Close()
	var engine string
	for rows.Next() {
		if err := rows.Scan(&engine); err != nil {
			return "", err
		}
	}
	return engine, rows.Err()
}
