package dialect

// Call is a statement with its arguments in order, ready to run:
// db.ExecContext(ctx, c.SQL, c.Args...). The inbox statements hand out
// Calls only through a Call method with named, typed parameters, so a
// caller cannot put its arguments in the wrong order, nor encode a time
// the way the table does not keep it.
type Call struct {
	SQL  string
	Args []any
}

// text is one inbox statement and what writing its arguments needs.
type text struct {
	sql  string
	tm   Times
	kind Kind
	// order is the parameter number of each placeholder in text order,
	// where the engine numbers none (MySQL); nil elsewhere.
	order []int
}

// SQL is the statement's text, "" where this table or database has none.
func (s text) SQL() string { return s.sql }

func (s text) call(args ...any) Call { return Call{SQL: s.sql, Args: reorder(s.order, args)} }

// text is a statement written with $n placeholders, in d's own.
func (d *Dialect) text(sql string, tm Times) text {
	t := text{sql: d.Rebind(sql), tm: tm, kind: d.Kind}
	if d.Kind == MySQL {
		t.order = placeOrder(sql)
	}
	return t
}

// nullable is a text argument that is NULL when empty.
func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}
