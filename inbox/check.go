package inbox

import (
	"context"
	"fmt"
	"reflect"
	"strings"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/internal/claim"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// TableError says what is wrong with an inbox table and the DDL that fixes
// it. Check with errors.As.
type TableError struct {
	Table   string
	Column  string // empty when the problem is the table or an index
	Problem string
	Fix     string // DDL, or what to run
}

func (e *TableError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "inbox: table %q: ", e.Table)
	if e.Column != "" {
		fmt.Fprintf(&b, "column %q ", e.Column)
	}
	b.WriteString(e.Problem)
	if e.Fix != "" {
		b.WriteString("; fix it with: ")
		b.WriteString(e.Fix)
	}
	return b.String()
}

// checkTable reads table's catalog and returns what the claim forms need, or
// a TableError naming the first problem and its fix.
func checkTable(ctx context.Context, b *Broker, table string, s *shape, grouped bool) (claim.Table, error) {
	d := b.d
	if err := d.Probe(ctx, b.db); err != nil {
		return claim.Table{}, fmt.Errorf("inbox: table %q: %w", table, err)
	}
	cols, err := d.Columns(ctx, b.db, table)
	if err != nil {
		return claim.Table{}, fmt.Errorf("inbox: table %q: %w", table, err)
	}
	if len(cols) == 0 {
		return claim.Table{}, &TableError{Table: table,
			Problem: fmt.Sprintf("does not exist (migrations.Apply(ctx, db, %q) creates the reference table)", table),
			Fix:     createTable(d, table, s, grouped)}
	}
	if err := checkEngine(ctx, b, table); err != nil {
		return claim.Table{}, err
	}
	byName := map[string]dialect.Column{}
	for _, c := range cols {
		byName[c.Name] = c
	}
	var tm dialect.Times
	for _, f := range s.fields {
		c, ok := byName[f.column]
		if !ok {
			return claim.Table{}, fixErr(ctx, b, table, cols, f, "is missing", false)
		}
		if f.role == "" {
			continue
		}
		if p := d.ColumnProblem(string(f.role), c.Type); p != "" {
			return claim.Table{}, fixErr(ctx, b, table, cols, f, p, true)
		}
		if f.role == RolePriority && !c.NotNull {
			return claim.Table{}, nullablePriority(ctx, b, table, cols, f.column)
		}
		if f.role == RoleLockedUntil {
			tm = dialect.Times{Kind: d.Kind, Encoding: dialect.EncodingFor(d.Kind, c.Type), InDatabase: clock.InDatabase(b.clock)}
		}
	}
	idx, err := d.Indexes(ctx, b.db, table)
	if err != nil {
		return claim.Table{}, fmt.Errorf("inbox: table %q: %w", table, err)
	}
	id, group := s.column(RoleID), s.column(RoleGroup)
	if !leads(idx, id) {
		return claim.Table{}, &TableError{Table: table, Column: id, Problem: "has no index (claims walk rows in id order): make it the primary key, or give it a unique index",
			Fix: d.CreateIndex(table, []string{id}, true, "")}
	}
	if grouped && !leads(idx, group) {
		return claim.Table{}, &TableError{Table: table, Column: group, Problem: "has no index serving a claim of one group",
			Fix: d.CreateIndex(table, []string{group, id}, false, "group_id")}
	}

	if err := checkKeyAndPriority(ctx, b, table, s, grouped, idx); err != nil {
		return claim.Table{}, err
	}

	t := claim.Table{Unquoted: table, Times: tm}
	if t.OneHeap, err = d.OneHeap(ctx, b.db, table); err != nil {
		return claim.Table{}, fmt.Errorf("inbox: table %q: %w", table, err)
	}
	if t.Blocks, err = d.BlockSequence(ctx, b.db, table); err != nil {
		return claim.Table{}, fmt.Errorf("inbox: table %q: %w", table, err)
	}
	t.Name = d.Quote(table)
	t.ID = d.Quote(id)
	t.LockedUntil = d.Quote(s.column(RoleLockedUntil))
	if grouped {
		t.Group = d.Quote(group) // claims filter on it; whole-table claims do not
	}
	if p := s.column(RolePriority); p != "" {
		t.Priority = d.Quote(p)
	}
	if a := s.column(RoleAttempts); a != "" {
		t.Attempts = d.Quote(a)
	}
	if e := s.column(RoleLastError); e != "" {
		t.LastError = d.Quote(e)
	}
	scanned := s.scanned()
	for _, f := range scanned {
		t.Columns = append(t.Columns, claimColumn(d, f))
	}
	typ := s.typ
	t.New = func(dest []any) (any, []any) {
		v := reflect.New(typ)
		e := v.Elem()
		for _, f := range scanned {
			fv := e.FieldByIndex(f.index)
			if f.readsText() {
				dest = append(dest, textScan{fv})
				continue
			}
			dest = append(dest, fv.Addr().Interface())
		}
		return v.Interface(), dest
	}
	b.mu.Lock()
	b.encodings[table] = tm
	b.mu.Unlock()
	return t, nil
}

// checkEngine refuses a MariaDB/MySQL table whose engine has no row locks
// or transactions (MyISAM, Aria, MEMORY): claims there would not be
// atomic, and a transactional handler's ack would not commit with its
// writes.
func checkEngine(ctx context.Context, b *Broker, table string) error {
	engine, err := b.d.Engine(ctx, b.db, table)
	if err != nil {
		return fmt.Errorf("inbox: table %q: %w", table, err)
	}
	if problem, fix := b.d.EngineProblem(table, engine); problem != "" {
		return &TableError{Table: table, Problem: problem, Fix: fix}
	}
	return nil
}

// leads reports whether an index starts with column col.
func leads(idx []dialect.Index, col string) bool {
	for _, ix := range idx {
		if len(ix.Columns) > 0 && ix.Columns[0] == col {
			return true
		}
	}
	return false
}
