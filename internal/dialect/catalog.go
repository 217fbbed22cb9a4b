package dialect

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Column is a table's column as the catalog describes it.
type Column struct {
	Name string
	Type string // the declared type, lower case
	PK   bool   // part of the primary key
	// NotNull and Default (its SQL text, "" for none) are what the fixes
	// a table check prints need: the rebuild of a SQLite table (see
	// SQLiteRebuild) and a priority column made NOT NULL (NotNullFix).
	NotNull bool
	Default string
}

// Index is an index's key columns in order ("" for an expression).
type Index struct {
	Name    string
	Columns []string
	Partial bool // it has a WHERE: it holds only the rows that meet it
}

// Querier runs a query: a *sql.DB, *sql.Conn or *sql.Tx.
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// Columns reads the columns of table from the catalog; none means no table.
func (d *Dialect) Columns(ctx context.Context, db Querier, table string) ([]Column, error) {
	var rows *sql.Rows
	var err error
	switch d.Kind {
	case MySQL:
		q, args := mysqlColumnsQuery(table)
		rows, err = db.QueryContext(ctx, q, args...)
	case Postgres:
		rows, err = db.QueryContext(ctx, `SELECT a.attname, format_type(a.atttypid, a.atttypmod),
	COALESCE(a.attnum = ANY(i.indkey), false), a.attnotnull, COALESCE(pg_get_expr(ad.adbin, ad.adrelid), '')
FROM pg_attribute a
LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary
LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum`, Quote(table))
	default:
		schema, name := splitSchema(table)
		rows, err = db.QueryContext(ctx, `SELECT name, type, pk > 0, "notnull" <> 0, COALESCE(dflt_value, '') FROM pragma_table_info(?1, ?2) ORDER BY cid`, name, schema)
	}
	if err != nil {
		return nil, fmt.Errorf("read the columns of %q: %w", table, err)
	}
	defer rows.Close()
	var cols []Column
	for rows.Next() {
		var c Column
		if err := rows.Scan(&c.Name, &c.Type, &c.PK, &c.NotNull, &c.Default); err != nil {
			return nil, err
		}
		c.Type = strings.ToLower(c.Type)
		if d.Kind == MySQL {
			mysqlColumn(&c)
		}
		cols = append(cols, c)
	}
	return cols, rows.Err()
}

// OneHeap reports whether table is one heap on Postgres: neither
// partitioned nor the parent of other tables, so a row's ctid names it
// alone among the rows a statement on the table sees. Always false on
// SQLite.
func (d *Dialect) OneHeap(ctx context.Context, db Querier, table string) (bool, error) {
	if d.Kind != Postgres {
		return false, nil
	}
	rows, err := db.QueryContext(ctx, `SELECT c.relkind = 'r' AND NOT EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhparent = c.oid)
FROM pg_class c WHERE c.oid = to_regclass($1)`, Quote(table))
	if err != nil {
		return false, fmt.Errorf("read the kind of %q: %w", table, err)
	}
	defer rows.Close()
	one := false
	for rows.Next() {
		if err := rows.Scan(&one); err != nil {
			return false, err
		}
	}
	return one, rows.Err()
}

// BlockSequence returns the schema-qualified, quoted name of table's block
// sequence (see migrations.ApplyClaimBlocks), or "" when it has none that
// claims may use: one in the table's schema, owned by the table (a table
// made anew under the name of a renamed one does not take the old one's),
// of bigint values from the least, that this session may advance and set.
// Always "" on SQLite.
func (d *Dialect) BlockSequence(ctx context.Context, db Querier, table string) (string, error) {
	if d.Kind != Postgres || BlockSequenceName(table) == "" {
		return "", nil
	}
	seq := table[strings.LastIndex(table, ".")+1:] + BlockSuffix
	rows, err := db.QueryContext(ctx, `SELECT n.nspname FROM pg_class t
JOIN pg_class s ON s.relnamespace = t.relnamespace AND s.relname = $2 AND s.relkind = 'S'
JOIN pg_namespace n ON n.oid = s.relnamespace
JOIN pg_sequence q ON q.seqrelid = s.oid
WHERE t.oid = to_regclass($1) AND q.seqtypid = 'bigint'::regtype AND q.seqmin = -9223372036854775808 AND q.seqincrement = 1
AND EXISTS (SELECT 1 FROM pg_depend p WHERE p.classid = 'pg_class'::regclass AND p.objid = s.oid
	AND p.refclassid = 'pg_class'::regclass AND p.refobjid = t.oid AND p.deptype = 'a')
AND has_sequence_privilege(s.oid, 'UPDATE')`, Quote(table), seq)
	if err != nil {
		return "", fmt.Errorf("look for the block sequence of %q: %w", table, err)
	}
	defer rows.Close()
	var schema string
	found := rows.Next()
	if found {
		if err := rows.Scan(&schema); err != nil {
			return "", err
		}
	}
	if err := rows.Close(); err != nil || !found || CheckIdent(schema) != nil {
		return "", err
	}
	return Quote(schema + "." + seq), nil
}

// BlockSuffix ends the name of a table's block sequence.
const BlockSuffix = "_claim_blocks"

// BlockSequenceName is the quoted name of the block sequence of table (a
// checked name), in its schema; "" when the name would be longer than an
// identifier may be: Postgres would cut it, and two tables could share one.
func BlockSequenceName(table string) string {
	if len(table[strings.LastIndex(table, ".")+1:])+len(BlockSuffix) > MaxIdent {
		return ""
	}
	return Quote(table + BlockSuffix)
}

// Indexes reads the indexes of table with their columns in order. On SQLite
// an INTEGER PRIMARY KEY is the rowid itself and is reported as an index.
func (d *Dialect) Indexes(ctx context.Context, db Querier, table string) ([]Index, error) {
	var out []Index
	if d.Kind == MySQL {
		return mysqlIndexes(ctx, db, table)
	}
	if d.Kind == Postgres {
		// Key columns only: an INCLUDE column orders nothing. An
		// expression's place (attnum 0) reads as "".
		rows, err := db.QueryContext(ctx, `SELECT c.relname, i.indpred IS NOT NULL, string_agg(COALESCE(a.attname, ''), ',' ORDER BY k.ord)
FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid
CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum AND k.attnum > 0
WHERE i.indrelid = to_regclass($1) AND k.ord <= i.indnkeyatts
GROUP BY c.relname, i.indpred IS NOT NULL`, Quote(table))
		if err != nil {
			return nil, fmt.Errorf("read the indexes of %q: %w", table, err)
		}
		defer rows.Close()
		for rows.Next() {
			var ix Index
			var cols string
			if err := rows.Scan(&ix.Name, &ix.Partial, &cols); err != nil {
				return nil, err
			}
			ix.Columns = strings.Split(cols, ",")
			out = append(out, ix)
		}
		return out, rows.Err()
	}
	schema, name := splitSchema(table)
	cols, err := d.Columns(ctx, db, table)
	if err != nil {
		return nil, err
	}
	// Only an INTEGER PRIMARY KEY names the rowid; another primary key
	// has an index of its own, which the list below reads.
	var pk []string
	for _, c := range cols {
		if c.PK {
			pk = append(pk, c.Name)
		}
	}
	if len(pk) == 1 && slices.ContainsFunc(cols, func(c Column) bool { return c.Name == pk[0] && c.Type == "integer" }) {
		out = append(out, Index{Name: "rowid", Columns: pk})
	}
	rows, err := db.QueryContext(ctx, `SELECT il.name, il.partial <> 0, ii.seqno, ii.name FROM pragma_index_list(?1, ?2) AS il, pragma_index_info(il.name, ?2) AS ii`, name, schema)
	if err != nil {
		return nil, fmt.Errorf("read the indexes of %q: %w", table, err)
	}
	defer rows.Close()
	type entry struct {
		seq int
		col string
	}
	byName := map[string][]entry{}
	partial := map[string]bool{}
	for rows.Next() {
		var ix string
		var e entry
		var col sql.NullString
		var part bool
		if err := rows.Scan(&ix, &part, &e.seq, &col); err != nil {
			return nil, err
		}
		e.col = col.String
		byName[ix] = append(byName[ix], e)
		partial[ix] = part
	}
	for ix, es := range byName {
		sort.Slice(es, func(i, j int) bool { return es[i].seq < es[j].seq })
		idx := Index{Name: ix, Partial: partial[ix]}
		for _, e := range es {
			idx.Columns = append(idx.Columns, e.col)
		}
		out = append(out, idx)
	}
	return out, rows.Err()
}

func splitSchema(table string) (schema, name string) {
	if s, n, ok := strings.Cut(table, "."); ok {
		return s, n
	}
	return "main", table
}
