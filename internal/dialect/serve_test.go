package dialect_test

import (
	"testing"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// An index serves a walk when its leading key columns, with what the engine
// keeps at the end of every index, are the walk's columns.
func TestServes(t *testing.T) {
	rowid := dialect.Index{Name: "rowid", Columns: []string{"id"}}
	primary := dialect.Index{Name: "PRIMARY", Columns: []string{"id"}}
	pkey := dialect.Index{Name: "jobs_pkey", Columns: []string{"id"}}
	group := dialect.Index{Name: "jobs_g", Columns: []string{"g"}}
	wide := dialect.Index{Name: "jobs_gpi", Columns: []string{"g", "p", "id", "x"}}
	partial := dialect.Index{Name: "jobs_gi", Columns: []string{"g", "id"}, Partial: true}
	for _, c := range []struct {
		kind  dialect.Kind
		idx   []dialect.Index
		cols  []string
		want  bool
		named string
	}{
		{dialect.SQLite, []dialect.Index{rowid, group}, []string{"g", "id"}, true, ""},
		{dialect.MySQL, []dialect.Index{primary, group}, []string{"g", "id"}, true, ""},
		{dialect.Postgres, []dialect.Index{pkey, group}, []string{"g", "id"}, false, ""},
		{dialect.Postgres, []dialect.Index{pkey, wide}, []string{"g", "p", "id"}, true, ""},
		{dialect.Postgres, []dialect.Index{pkey, wide}, []string{"g", "id"}, false, ""},
		{dialect.SQLite, []dialect.Index{rowid, wide}, []string{"g", "id"}, false, ""},
		{dialect.SQLite, []dialect.Index{group}, []string{"g", "id"}, false, ""}, // no rowid alias
		{dialect.Postgres, []dialect.Index{pkey, partial}, []string{"g", "id"}, false, "jobs_gi"},
		{dialect.SQLite, []dialect.Index{rowid}, []string{"id"}, true, ""},
	} {
		d := dialect.Of(c.kind)
		if got := d.Serves(c.idx, c.cols); got != c.want {
			t.Errorf("%v: Serves(%v, %v) = %v, want %v", c.kind, c.idx, c.cols, got, c.want)
		}
		if got := d.PartialServing(c.idx, c.cols); got != c.named {
			t.Errorf("%v: PartialServing(%v, %v) = %q, want %q", c.kind, c.idx, c.cols, got, c.named)
		}
	}
}
