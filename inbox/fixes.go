package inbox

import (
	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

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
