package inbox

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/internal/claim"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// TableError says what is wrong with an inbox table and the DDL that fixes
// it. Check with errors.As. Problems lists every problem the check found,
// each with its fix, in the order the fixes run; Column, Problem and Fix
// are the first of them.
type TableError struct {
	Table   string
	Column  string // empty when the problem is the table or an index
	Problem string
	Fix     string // DDL, or what to run
	// Problems is every problem of the table, the first included, in the
	// order their fixes run: each runs as printed after those before it,
	// and once all have run the table passes. A problem whose Fix is empty
	// is fixed by an earlier one (it says which). Nil when the error was
	// made with the first problem alone.
	Problems []TableProblem
}

// TableProblem is one problem of an inbox table and the DDL that fixes it.
type TableProblem struct {
	Column  string // empty when the problem is the table or an index
	Problem string
	Fix     string
}

func (p TableProblem) String() string {
	var b strings.Builder
	if p.Column != "" {
		fmt.Fprintf(&b, "column %q ", p.Column)
	}
	b.WriteString(p.Problem)
	if p.Fix != "" {
		b.WriteString("; fix it with: ")
		b.WriteString(p.Fix)
	}
	return b.String()
}

func (e *TableError) Error() string {
	if len(e.Problems) <= 1 {
		return fmt.Sprintf("inbox: table %q: %s", e.Table, TableProblem{Column: e.Column, Problem: e.Problem, Fix: e.Fix})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "inbox: table %q: %d problems; run their fixes in this order:", e.Table, len(e.Problems))
	for i, p := range e.Problems {
		fmt.Fprintf(&b, "\n  %d. %s", i+1, p)
	}
	return b.String()
}

// tableError is the TableError of problems (at least one).
func tableError(table string, problems []TableProblem) *TableError {
	first := problems[0]
	return &TableError{Table: table, Column: first.Column, Problem: first.Problem, Fix: first.Fix, Problems: problems}
}

// checkTable reads table's catalog and returns what the claim forms need, or
// a TableError naming every problem and its fix.
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
		return claim.Table{}, tableError(table, []TableProblem{{
			Problem: fmt.Sprintf("does not exist (migrations.Apply(ctx, db, %q) creates the reference table)", table),
			Fix:     createTable(d, table, s, grouped)}})
	}
	var problems []TableProblem
	engine, err := checkEngine(ctx, b, table)
	if err != nil {
		return claim.Table{}, err
	}
	problems = append(problems, engine...)
	changes, why, tm := columnChanges(b, s, cols)
	fixes, err := d.ColumnFixes(ctx, b.db, table, cols, changes)
	if err != nil {
		return claim.Table{}, fmt.Errorf("inbox: table %q: write the fixes: %w", table, err)
	}
	rebuiltBy := ""
	for i, f := range fixes {
		ch := changes[f.Change]
		p := TableProblem{Column: ch.Column, Problem: why[f.Change], Fix: f.DDL}
		switch {
		case i > 0 && fixes[i-1].Change == f.Change:
			p.Problem = "then takes the second statement of its fix"
		case f.DDL == "":
			p.Problem += fmt.Sprintf(" (the rebuild that fixes column %q fixes it too)", rebuiltBy)
		case rebuiltBy == "":
			rebuiltBy = ch.Column
		}
		problems = append(problems, p)
	}
	idx, err := d.Indexes(ctx, b.db, table)
	if err != nil {
		return claim.Table{}, fmt.Errorf("inbox: table %q: %w", table, err)
	}
	problems = append(problems, indexProblems(d, table, s, grouped, idx, changes)...)
	key, err := checkKey(ctx, b, table, s)
	if err != nil {
		return claim.Table{}, err
	}
	problems = append(problems, key...)
	if len(problems) > 0 {
		return claim.Table{}, tableError(table, problems)
	}
	id, group := s.column(RoleID), s.column(RoleGroup)

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
func checkEngine(ctx context.Context, b *Broker, table string) ([]TableProblem, error) {
	engine, err := b.d.Engine(ctx, b.db, table)
	if err != nil {
		return nil, fmt.Errorf("inbox: table %q: %w", table, err)
	}
	if problem, fix := b.d.EngineProblem(table, engine); problem != "" {
		return []TableProblem{{Problem: problem, Fix: fix}}, nil
	}
	return nil, nil
}

// columnChanges is what the columns of s need, each change beside why
// (its problem), and the encoding of locked_until. A column gets at most
// one change: a missing column or a type its role cannot use comes first.
func columnChanges(b *Broker, s *shape, cols []dialect.Column) ([]dialect.ColumnChange, []string, dialect.Times) {
	d := b.d
	byName := map[string]dialect.Column{}
	for _, c := range cols {
		byName[c.Name] = c
	}
	var tm dialect.Times
	var changes []dialect.ColumnChange
	var why []string
	for _, f := range s.fields {
		change := func(kind dialect.ChangeKind, problem string) {
			changes = append(changes, dialect.ColumnChange{Column: f.column, Kind: kind, Decl: d.ColumnDecl(string(f.role), f.typ, cols, f.column),
				PrimaryKey: f.role == RoleID, Fill: "0"})
			why = append(why, problem)
		}
		c, ok := byName[f.column]
		switch {
		case !ok:
			change(dialect.AddColumn, "is missing")
			continue
		case f.role == "":
			continue
		}
		if p := d.ColumnProblem(string(f.role), c.Type); p != "" {
			change(dialect.Retype, p)
			continue
		}
		switch f.role {
		case RolePriority:
			if !c.NotNull {
				// Postgres sorts NULLs last and SQLite first, so such rows
				// would be taken at opposite ends of the order, and a claim's
				// walk could not resume past them.
				change(dialect.SetNotNull, "may hold NULL, which Postgres sorts after every priority and SQLite before: declare it NOT NULL (its NULLs become 0)")
			}
		case RoleLockedUntil:
			if p := d.NullableProblem(c); p != "" {
				change(dialect.DropNotNull, p)
			}
			tm = dialect.Times{Kind: d.Kind, Encoding: dialect.EncodingFor(d.Kind, c.Type), InDatabase: clock.InDatabase(b.clock)}
		}
	}
	return changes, why, tm
}

// indexProblems asks for the indexes claims walk: the id's, and where
// claims take one group or a priority order, one whose leading columns are
// the group, the priority and the id (any index that starts so serves,
// wider ones too). A column a fix makes the key needs no index of its own.
func indexProblems(d *dialect.Dialect, table string, s *shape, grouped bool, idx []dialect.Index, changes []dialect.ColumnChange) []TableProblem {
	var out []TableProblem
	id := s.column(RoleID)
	keyed := slices.ContainsFunc(changes, func(ch dialect.ColumnChange) bool { return ch.Column == id && d.KeysColumn(ch) })
	if !keyed && !d.Serves(idx, []string{id}) {
		out = append(out, TableProblem{Column: id, Problem: "has no index (claims walk rows in id order): make it the primary key, or give it a unique index" + partialNote(d, idx, []string{id}),
			Fix: d.CreateIndex(table, []string{id}, true, "")})
	}
	var walk []string
	if grouped {
		walk = append(walk, s.column(RoleGroup))
	}
	p := s.column(RolePriority)
	if p != "" {
		walk = append(walk, p)
	}
	if len(walk) == 0 {
		return out
	}
	want := append(walk, id)
	if d.Serves(idx, want) {
		return out
	}
	if p == "" {
		return append(out, TableProblem{Column: walk[0], Problem: fmt.Sprintf("has no index serving a claim of one group (an index whose columns start with (%s))", strings.Join(want, ", ")) + partialNote(d, idx, want),
			Fix: d.CreateIndex(table, want, false, "group_id")})
	}
	return append(out, TableProblem{Column: p, Problem: fmt.Sprintf("has no index on (%s) (claims walk rows by priority, then id)", strings.Join(want, ", ")) + partialNote(d, idx, want),
		Fix: d.CreateIndex(table, want, false, "")})
}

// partialNote says which partial index would serve cols, were it whole.
func partialNote(d *dialect.Dialect, idx []dialect.Index, cols []string) string {
	if name := d.PartialServing(idx, cols); name != "" {
		return fmt.Sprintf("; index %q has those columns but is partial, and a claim's condition does not imply its WHERE", name)
	}
	return ""
}
