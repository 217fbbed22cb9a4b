package dialect

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// SQLiteRebuild writes the statements that rebuild a SQLite table with
// columns changed or added, which ALTER TABLE cannot do (a primary key
// column cannot be added, nor a column's type changed): a new table with
// every column of cols, each declared as before unless decls gives it a new
// declaration, plus the columns of decls that cols lacks; the rows copied;
// the old table dropped and the new one renamed; then the old table's own
// indexes and triggers created again. A column declared PRIMARY KEY in
// decls takes the key from the column that had it, which keeps a UNIQUE
// constraint. One transaction: run it as printed (sqlite3 CLI, or one Exec).
func (d *Dialect) SQLiteRebuild(ctx context.Context, db Querier, table string, cols []Column, decls map[string]string) (string, error) {
	return d.sqliteRebuild(ctx, db, table, cols, decls, nil)
}

// NotNullFix is the DDL that makes column col of table NOT NULL, its NULLs
// set to fill first, with fill its default where it has none: on Postgres
// an UPDATE and an ALTER in one transaction; on SQLite, which cannot alter
// a column, a rebuild (see SQLiteRebuild) that copies NULLs as fill.
func (d *Dialect) NotNullFix(ctx context.Context, db Querier, table string, cols []Column, col, fill string) (string, error) {
	var c Column
	if i := slices.IndexFunc(cols, func(c Column) bool { return c.Name == col }); i >= 0 {
		c = cols[i]
	}
	dflt := c.Default
	if dflt == "" {
		dflt = fill
	}
	if d.Kind == SQLite {
		decl := strings.ToUpper(c.Type) + " NOT NULL DEFAULT (" + dflt + ")"
		return d.sqliteRebuild(ctx, db, table, cols, map[string]string{col: decl},
			map[string]string{col: fmt.Sprintf("COALESCE(%s, %s)", Quote(col), fill)})
	}
	if d.Kind == MySQL {
		return strings.Join(d.mysqlNotNull(table, c, fill, dflt), "; "), nil
	}
	setDefault := ""
	if c.Default == "" {
		setDefault = fmt.Sprintf(" ALTER COLUMN %s SET DEFAULT %s,", Quote(col), fill)
	}
	return fmt.Sprintf("BEGIN; UPDATE %[1]s SET %[2]s = %[3]s WHERE %[2]s IS NULL; ALTER TABLE %[1]s%[4]s ALTER COLUMN %[2]s SET NOT NULL; COMMIT;",
		Quote(table), Quote(col), fill, setDefault), nil
}

// mysqlNotNull is NotNullFix on MariaDB/MySQL: two statements, since a
// column with NULLs is not made NOT NULL in strict mode. The ALTER keeps
// the column's default dflt, or sets fill.
func (d *Dialect) mysqlNotNull(table string, c Column, fill, dflt string) []string {
	return []string{
		fmt.Sprintf("UPDATE %[1]s SET %[2]s = %[3]s WHERE %[2]s IS NULL", d.Quote(table), d.Quote(c.Name), fill),
		fmt.Sprintf("ALTER TABLE %s MODIFY COLUMN %s %s NOT NULL DEFAULT %s", d.Quote(table), d.Quote(c.Name), strings.ToUpper(c.Type), dflt),
	}
}

// sqliteRebuild is SQLiteRebuild copying column c as the expression
// fill[c] where fill has one.
func (d *Dialect) sqliteRebuild(ctx context.Context, db Querier, table string, cols []Column, decls, fill map[string]string) (string, error) {
	schema, name := splitSchema(table)
	newPK := false
	for _, decl := range decls {
		newPK = newPK || strings.Contains(strings.ToUpper(decl), "PRIMARY KEY")
	}
	var defs, copied, read []string
	seen := map[string]bool{}
	for _, c := range cols {
		seen[c.Name] = true
		copied = append(copied, Quote(c.Name))
		read = append(read, cmp.Or(fill[c.Name], Quote(c.Name)))
		if decl, ok := decls[c.Name]; ok {
			defs = append(defs, Quote(c.Name)+" "+decl)
			continue
		}
		def := Quote(c.Name)
		if c.Type != "" {
			def += " " + strings.ToUpper(c.Type)
		}
		if c.PK && !newPK {
			def += " PRIMARY KEY"
		} else if c.PK {
			def += " UNIQUE"
		}
		if c.NotNull {
			def += " NOT NULL"
		}
		if c.Default != "" {
			// In parentheses: the catalog gives an expression's default
			// (strftime(...)) without the ones it was declared with.
			def += " DEFAULT (" + c.Default + ")"
		}
		defs = append(defs, def)
	}
	for _, c := range slices.Sorted(maps.Keys(decls)) {
		if !seen[c] {
			defs = append(defs, Quote(c)+" "+decls[c])
		}
	}
	rows, err := db.QueryContext(ctx, `SELECT sql FROM `+Quote(schema)+`.sqlite_master
WHERE tbl_name = ?1 AND type IN ('index', 'trigger') AND sql IS NOT NULL ORDER BY type, name`, name)
	if err != nil {
		return "", fmt.Errorf("read the indexes and triggers of %q: %w", table, err)
	}
	defer rows.Close()
	var again []string
	for rows.Next() {
		var stmt string
		if err := rows.Scan(&stmt); err != nil {
			return "", err
		}
		again = append(again, stmt+";")
	}
	if err := rows.Err(); err != nil {
		return "", err
	}
	tmp := Quote(schema) + "." + Quote(name+"_rebuild")
	var b strings.Builder
	fmt.Fprintf(&b, "BEGIN IMMEDIATE; CREATE TABLE %s (%s); ", tmp, strings.Join(defs, ", "))
	fmt.Fprintf(&b, "INSERT INTO %s (%s) SELECT %s FROM %s; ", tmp, strings.Join(copied, ", "), strings.Join(read, ", "), Quote(table))
	fmt.Fprintf(&b, "DROP TABLE %s; ALTER TABLE %s RENAME TO %s; ", Quote(table), tmp, Quote(name))
	for _, s := range again {
		b.WriteString(s + " ")
	}
	b.WriteString("COMMIT;")
	return b.String(), nil
}
