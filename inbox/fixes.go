package inbox

import (
	"context"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// fixErr is the TableError for field f of table: missing, or (retype) of a
// type its role cannot use, with DDL that runs as printed on that table
// (see dialect.ColumnFix).
func fixErr(ctx context.Context, b *Broker, table string, cols []dialect.Column, f field, problem string, retype bool) error {
	decl := b.d.ColumnDecl(string(f.role), f.typ, cols, f.column)
	return &TableError{Table: table, Column: f.column, Problem: problem,
		Fix: b.d.ColumnFix(ctx, b.db, table, cols, f.column, decl, retype, f.role == RoleID)}
}

// createTable is the DDL of a table with the columns of s, each of the type
// a fix would give it, and (grouped) the index a claim of one group needs.
func createTable(d *dialect.Dialect, table string, s *shape, grouped bool) string {
	defs := make([]string, 0, len(s.fields))
	for _, f := range s.fields {
		defs = append(defs, d.Quote(f.column)+" "+d.ColumnDecl(string(f.role), f.typ, nil, f.column))
	}
	var index []string
	if g := s.column(RoleGroup); grouped && g != "" {
		index = []string{g, s.column(RoleID)}
	}
	return d.CreateTable(table, defs, index)
}
