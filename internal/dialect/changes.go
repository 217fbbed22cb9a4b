package dialect

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
)

// ChangeKind is what a table check's fix does to one column.
type ChangeKind int

// The changes a table check asks of a column.
const (
	AddColumn   ChangeKind = iota // missing: add it, declared Decl
	Retype                        // of a type its role cannot use: declare it Decl
	SetNotNull                    // may hold NULL: its NULLs become Fill, then NOT NULL
	DropNotNull                   // must take NULL (locked_until): NOT NULL and an empty default go
)

// ColumnChange is one change a table check asks of one column.
type ColumnChange struct {
	Column     string
	Kind       ChangeKind
	Decl       string // AddColumn and Retype: the declaration it gets (ColumnDecl)
	PrimaryKey bool   // AddColumn and Retype of the id column
	Fill       string // SetNotNull: the value its NULLs become, and its default where it has none
}

// Fix is the DDL of the change at index Change of a ColumnFixes call. A
// change made by two statements (NOT NULL on MariaDB/MySQL: the NULLs set,
// then the column altered) has two fixes in a row.
type Fix struct {
	Change int
	DDL    string // "" where an earlier fix (SQLite's one rebuild) made the change too
}

// ColumnFixes writes the DDL of changes to table (of columns cols), in the
// order it runs, each fix runnable as printed after those before it. On
// Postgres and MariaDB/MySQL each change is one fix (MariaDB/MySQL's NOT
// NULL two), in the order given. On
// SQLite, whose ALTER TABLE only adds columns, every other change is made by
// one rebuild (see SQLiteRebuild), first, as the fix of the first such
// change; the others it makes follow it with no DDL of their own; then the
// columns added. Two rebuilds, each read from the table as it is now, would
// undo each other.
func (d *Dialect) ColumnFixes(ctx context.Context, db *sql.DB, table string, cols []Column, changes []ColumnChange) ([]Fix, error) {
	if d.Kind != SQLite {
		out := make([]Fix, 0, len(changes))
		for i, ch := range changes {
			if d.Kind == MySQL && ch.Kind == SetNotNull {
				// A pool runs one statement at a time: two fixes.
				c := column(cols, ch.Column)
				for _, stmt := range d.mysqlNotNull(table, c, ch.Fill, cmpOr(c.Default, ch.Fill)) {
					out = append(out, Fix{Change: i, DDL: stmt})
				}
				continue
			}
			ddl, err := d.columnFix(ctx, db, table, cols, ch)
			if err != nil {
				return nil, err
			}
			out = append(out, Fix{Change: i, DDL: ddl})
		}
		return out, nil
	}
	decls, fill := map[string]string{}, map[string]string{}
	var rebuilt, added []Fix
	for i, ch := range changes {
		c := column(cols, ch.Column)
		switch {
		case ch.Kind == AddColumn && !ch.PrimaryKey:
			added = append(added, Fix{Change: i, DDL: fmt.Sprintf("ALTER TABLE %s ADD COLUMN %s %s", d.Quote(table), d.Quote(ch.Column), ch.Decl)})
			continue
		case ch.Kind == SetNotNull:
			decls[ch.Column] = strings.ToUpper(c.Type) + " NOT NULL DEFAULT (" + cmpOr(c.Default, ch.Fill) + ")"
			fill[ch.Column] = fmt.Sprintf("COALESCE(%s, %s)", Quote(ch.Column), ch.Fill)
		case ch.Kind == DropNotNull:
			decls[ch.Column] = strings.ToUpper(c.Type)
			fill[ch.Column] = fmt.Sprintf("NULLIF(%s, '')", Quote(ch.Column))
		default:
			decls[ch.Column] = ch.Decl
		}
		rebuilt = append(rebuilt, Fix{Change: i})
	}
	if len(rebuilt) > 0 {
		ddl, err := d.sqliteRebuild(ctx, db, table, cols, decls, fill)
		if err != nil {
			return nil, err
		}
		rebuilt[0].DDL = ddl
	}
	return append(rebuilt, added...), nil
}

// columnFix is the one statement of a change on Postgres or MariaDB/MySQL.
func (d *Dialect) columnFix(ctx context.Context, db *sql.DB, table string, cols []Column, ch ColumnChange) (string, error) {
	switch ch.Kind {
	case SetNotNull:
		return d.NotNullFix(ctx, db, table, cols, ch.Column, ch.Fill)
	case DropNotNull:
		if d.Kind == MySQL {
			return fmt.Sprintf("ALTER TABLE %s MODIFY COLUMN %s %s NULL", d.Quote(table), d.Quote(ch.Column), strings.ToUpper(column(cols, ch.Column).Type)), nil
		}
		return fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s DROP NOT NULL", Quote(table), Quote(ch.Column)), nil
	}
	return d.ColumnFix(ctx, db, table, cols, ch.Column, ch.Decl, ch.Kind == Retype, ch.PrimaryKey), nil
}

// KeysColumn reports whether the fix of ch leaves its column the primary
// key or unique, as an id column added, or retyped where the declaration
// is taken whole (SQLite's rebuild, MariaDB/MySQL's MODIFY; Postgres's
// ALTER ... TYPE changes the type alone).
func (d *Dialect) KeysColumn(ch ColumnChange) bool {
	keyed := strings.Contains(ch.Decl, "PRIMARY KEY") || strings.Contains(ch.Decl, "UNIQUE")
	return keyed && (ch.Kind == AddColumn || ch.Kind == Retype && d.Kind != Postgres)
}

// NullableProblem says what is wrong with locked_until column c, "" when
// nothing is: it must take NULL, which marks a row available (a publish,
// a release and an unpark write it), and on SQLite its default must not be
// the empty text, which is no time in any encoding.
func (d *Dialect) NullableProblem(c Column) string {
	switch {
	case c.NotNull:
		return "is NOT NULL, but NULL is what marks a row available (a publish, a release and an unpark write it): let it take NULL"
	case d.Kind == SQLite && (c.Default == "''" || c.Default == `""`):
		return "defaults to '', which is no time: a row written without it could not be read; let it default to NULL"
	}
	return ""
}

func column(cols []Column, name string) Column {
	if i := slices.IndexFunc(cols, func(c Column) bool { return c.Name == name }); i >= 0 {
		return cols[i]
	}
	return Column{Name: name}
}

func cmpOr(s, or string) string {
	if s == "" {
		return or
	}
	return s
}
