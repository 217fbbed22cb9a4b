package dialect

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

// UniqueOn reports whether table has a unique index (or unique constraint,
// or primary key) on column col alone, with no predicate: the index an
// INSERT ... ON CONFLICT (col) DO NOTHING needs.
func (d *Dialect) UniqueOn(ctx context.Context, db Querier, table, col string) (bool, error) {
	var q string
	var args []any
	if d.Kind == MySQL {
		where, a := mysqlSchema(table)
		q = `SELECT count(*) FROM information_schema.statistics s WHERE ` + where + ` AND non_unique = 0 AND column_name = ? AND sub_part IS NULL
AND (SELECT count(*) FROM information_schema.statistics o WHERE o.table_schema = s.table_schema AND o.table_name = s.table_name AND o.index_name = s.index_name) = 1`
		args = append(a, col)
	} else if d.Kind == Postgres {
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

// ByKeySQL reads the ids of the rows whose key column holds one of some
// keys. Returns id, key.
type ByKeySQL struct {
	text
	tail string // MySQL: what follows the keys
}

// Call reads the rows of keys (bound as a text[] on Postgres, a JSON array
// on SQLite).
func (s ByKeySQL) Call(keys []string) Call {
	if s.kind == MySQL {
		// One placeholder a key, written at the call: the keys are few
		// (a batch's duplicates).
		args := make([]any, len(keys))
		for i, k := range keys {
			args[i] = k
		}
		return Call{SQL: s.sql + "(" + strings.TrimSuffix(strings.Repeat("?,", len(keys)), ",") + ")" + s.tail, Args: args}
	}
	if s.kind == SQLite {
		b, _ := json.Marshal(keys) // strings always marshal
		return s.call(string(b))
	}
	return s.call(keys)
}

// ByKey writes ByKeySQL for table's id and key columns.
func (d *Dialect) ByKey(table, id, key string) ByKeySQL {
	if d.Kind == MySQL {
		return ByKeySQL{text: text{kind: d.Kind, sql: fmt.Sprintf("SELECT %s, %s FROM %s WHERE %s IN ", id, key, table, key)}}
	}
	if d.Kind == Postgres {
		return ByKeySQL{text: text{kind: d.Kind, sql: fmt.Sprintf("SELECT %s, %s FROM %s WHERE %s = ANY($1::text[])", id, key, table, key)}}
	}
	return ByKeySQL{text: text{kind: d.Kind, sql: fmt.Sprintf("SELECT %s, %s FROM %s WHERE %s IN (SELECT value FROM json_each(?1))", id, key, table, key)}}
}

// HistoryByKey is ByKey on a history table, run after a publish's insert
// in its transaction: on MySQL a locking read, which reads the newest
// committed rows whatever the transaction's snapshot, and waits for a move
// in flight (Postgres at READ COMMITTED reads them in each statement's
// snapshot).
func (d *Dialect) HistoryByKey(history, id, key string) ByKeySQL {
	s := d.ByKey(history, id, key)
	if d.Kind == MySQL {
		s.tail = " LOCK IN SHARE MODE"
	}
	return s
}

// UnpublishSQL deletes rows a publish wrote in its transaction whose keys
// it then found in the history. Returns the ids it deleted where the
// database can.
type UnpublishSQL struct {
	text
	returns bool
}

// Unpublish writes UnpublishSQL for table's id column (both quoted).
func (d *Dialect) Unpublish(table, id string) UnpublishSQL {
	if d.Kind == MySQL {
		return UnpublishSQL{text: text{kind: d.Kind, sql: fmt.Sprintf("DELETE FROM %s WHERE %s IN ", table, id)}}
	}
	if d.Kind == Postgres {
		return UnpublishSQL{text: text{kind: d.Kind, sql: fmt.Sprintf("DELETE FROM %s WHERE %s = ANY($1::bigint[]) RETURNING %s", table, id, id)}, returns: true}
	}
	return UnpublishSQL{text: text{kind: d.Kind, sql: fmt.Sprintf("DELETE FROM %s WHERE %s IN (SELECT value FROM json_each(?1)) RETURNING %s", table, id, id)}, returns: true}
}

// Returns says the statement returns the ids it deleted; where it does not
// (MySQL) it is run as an Exec.
func (s UnpublishSQL) Returns() bool { return s.returns }

// Call deletes rows ids.
func (s UnpublishSQL) Call(ids []int64) Call {
	switch s.kind {
	case MySQL:
		args := make([]any, len(ids))
		for i, id := range ids {
			args[i] = id
		}
		return Call{SQL: s.sql + "(" + strings.TrimSuffix(strings.Repeat("?,", len(ids)), ",") + ")", Args: args}
	case SQLite:
		b, _ := json.Marshal(ids) // integers always marshal
		return s.call(string(b))
	}
	return s.call(ids)
}

// ClaimColumn is what a claim reads of a column (quoted): the column, but a
// string key's NULL (no key) as "", since an empty key is written as NULL.
func ClaimColumn(col string, stringKey bool) string {
	if stringKey {
		return fmt.Sprintf("COALESCE(%s, '')", col)
	}
	return col
}
