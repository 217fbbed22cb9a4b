package dialect

import (
	"context"
	"fmt"
)

// UniqueOn reports whether table has a unique index (or unique constraint,
// or primary key) on column col alone, with no predicate: the index an
// INSERT ... ON CONFLICT (col) DO NOTHING needs.
func (d *Dialect) UniqueOn(ctx context.Context, db Querier, table, col string) (bool, error) {
	var q string
	var args []any
	if d.Kind == Postgres {
		q = `SELECT count(*) FROM pg_index i
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
WHERE i.indrelid = to_regclass($1) AND i.indisunique AND i.indpred IS NULL AND i.indnkeyatts = 1 AND a.attname = $2`
		args = []any{Quote(table), col}
	} else {
		schema, name := splitSchema(table)
		q = `SELECT count(*) FROM pragma_index_list(?1, ?3) AS il WHERE il."unique" = 1 AND il.partial = 0
AND (SELECT count(*) FROM pragma_index_info(il.name, ?3)) = 1
AND (SELECT ii.name FROM pragma_index_info(il.name, ?3) AS ii) = ?2`
		args = []any{name, col, schema}
	}
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return false, fmt.Errorf("read the unique indexes of %q: %w", table, err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		if err := rows.Scan(&n); err != nil {
			return false, err
		}
	}
	return n > 0, rows.Err()
}

// ByKey reads the ids of the rows whose key column holds one of keys: $1
// the keys (a text[] on Postgres, a JSON array on SQLite). Returns id, key.
func (d *Dialect) ByKey(table, id, key string) string {
	if d.Kind == Postgres {
		return fmt.Sprintf("SELECT %s, %s FROM %s WHERE %s = ANY($1::text[])", id, key, table, key)
	}
	return fmt.Sprintf("SELECT %s, %s FROM %s WHERE %s IN (SELECT value FROM json_each(?1))", id, key, table, key)
}
