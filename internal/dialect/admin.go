package dialect

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// AdminTable names an inbox table's columns for the operator's
// statements, quoted; optional roles are empty when the table lacks them.
type AdminTable struct {
	Table
	Payload, CreatedAt string
	Times              Times // host times only (InDatabase false)
}

// AdminFilter selects rows of an AdminTable.
type AdminFilter struct {
	Now     time.Time
	Horizon time.Time // now plus the queue's lease: held below it, delayed above
	// Floor is where held rows begin: a row due after now and at or
	// before it is delayed (waiting out a retry), not in work. Zero means
	// Now.
	Floor   time.Time
	Group   *string // nil for every group
	IDs     []int64 // nil for any id
	After   *int64  // ids above it; nil for any
	Through *int64  // ids at or below it; nil for any
	// ErrorContains keeps rows whose last error holds it ("" for any).
	ErrorContains string
	States        []string // nil for any state
}

// where writes the WHERE clause of f (after the word) and its parameters,
// numbered from 1 as $n (see Bind).
func (d *Dialect) where(t AdminTable, f AdminFilter) (string, []any, error) {
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	conds := []string{"TRUE"}
	if f.Group != nil {
		if t.Group == "" {
			return "", nil, fmt.Errorf("table %s has no group column", t.Name)
		}
		conds = append(conds, t.Group+" = "+arg(*f.Group))
	}
	if f.IDs != nil {
		arg(d.ListArg(f.IDs))
		conds = append(conds, d.InList(t.ID, len(args)))
	}
	if f.After != nil {
		conds = append(conds, t.ID+" > "+arg(*f.After))
	}
	if f.Through != nil {
		conds = append(conds, t.ID+" <= "+arg(*f.Through))
	}
	if f.ErrorContains != "" {
		if t.LastError == "" {
			return "", nil, fmt.Errorf("table %s has no last_error column to filter on", t.Name)
		}
		fn := "instr"
		if d.Kind == Postgres {
			fn = "strpos"
		}
		conds = append(conds, fmt.Sprintf("%s(%s, %s) > 0", fn, t.LastError, arg(f.ErrorContains)))
	}
	if f.States != nil {
		var ors []string
		for _, s := range f.States {
			c, err := d.stateCond(t, s, f, arg)
			if err != nil {
				return "", nil, err
			}
			ors = append(ors, c)
		}
		conds = append(conds, "("+strings.Join(ors, " OR ")+")")
	}
	return strings.Join(conds, " AND "), args, nil
}

// floor is f.Floor, or Now when it is zero.
func (f AdminFilter) floor() time.Time {
	if f.Floor.IsZero() {
		return f.Now
	}
	return f.Floor
}

func (d *Dialect) stateCond(t AdminTable, state string, f AdminFilter, arg func(any) string) (string, error) {
	lu := t.LockedUntil
	switch state {
	case StateAvailable:
		return availableCond(lu, arg(t.Times.Encode(f.Now))), nil
	case StateHeld:
		return heldCond(lu, arg(t.Times.Encode(f.floor())), arg(t.Times.Encode(f.Horizon))), nil
	case StateDelayed:
		late := delayedCond(lu, arg(t.Times.Encode(f.Horizon)), arg(t.Times.Encode(Waiting)))
		if !f.floor().After(f.Now) {
			return late, nil
		}
		return "(" + late + " OR " + heldCond(lu, arg(t.Times.Encode(f.Now)), arg(t.Times.Encode(f.floor()))) + ")", nil
	case StateParked:
		return parkedCond(lu, arg(t.Times.Encode(Never))), nil
	case StateWaiting:
		return waitingCond(lu, arg(t.Times.Encode(Waiting)), arg(t.Times.Encode(Never))), nil
	}
	return "", fmt.Errorf("unknown state %q: use available, held, delayed, waiting or parked", state)
}

// CountStatesSQL counts the rows of the first limit rows in id order that
// match a filter by state, and finds the oldest available row's created_at
// (its locked_until without one): available, held, delayed, parked,
// waiting, oldest, scanned.
type CountStatesSQL struct {
	text
	where []any         // the filter's parameters, which come first
	floor time.Duration // the filter's Floor after its Now
}

// Call counts as of now, held rows being those after the filter's floor
// (as far after now as the filter's was after its Now) and up to horizon,
// over at most limit rows.
func (s CountStatesSQL) Call(now, horizon time.Time, limit int) Call {
	args := append(slices.Clip(s.where), s.tm.Encode(now), s.tm.Encode(horizon), s.tm.Encode(Never), limit, s.tm.Encode(now.Add(s.floor)), s.tm.Encode(Waiting))
	return s.call(args...)
}

// CountStates writes CountStatesSQL for the rows of t that f selects.
func (d *Dialect) CountStates(t AdminTable, f AdminFilter) (CountStatesSQL, error) {
	where, args, err := d.where(t, f)
	if err != nil {
		return CountStatesSQL{}, err
	}
	return CountStatesSQL{d.text(d.countStates(t, where, len(args)+1), t.Times), args, f.floor().Sub(f.Now)}, nil
}

// countStates is CountStatesSQL's text; where's parameters come before
// parameter n, then now, horizon, never, limit and floor.
func (d *Dialect) countStates(t AdminTable, where string, n int) string {
	lu := t.LockedUntil
	oldest := lu
	if t.CreatedAt != "" {
		oldest = t.CreatedAt
	}
	p := func(i int) string { return fmt.Sprintf("$%d", n+i) }
	now, hz, never, floor, waiting := p(0), p(1), p(2), p(4), p(5)
	return fmt.Sprintf(`SELECT
	COALESCE(SUM(CASE WHEN %[1]s THEN 1 ELSE 0 END), 0),
	COALESCE(SUM(CASE WHEN %[2]s THEN 1 ELSE 0 END), 0),
	COALESCE(SUM(CASE WHEN %[3]s THEN 1 ELSE 0 END), 0),
	COALESCE(SUM(CASE WHEN %[4]s THEN 1 ELSE 0 END), 0),
	COALESCE(SUM(CASE WHEN %[11]s THEN 1 ELSE 0 END), 0),
	MIN(CASE WHEN %[1]s THEN oldest END),
	COUNT(*)
FROM (SELECT %[5]s AS lu, %[6]s AS oldest FROM %[7]s WHERE %[8]s ORDER BY %[9]s LIMIT %[10]s) AS s`,
		availableCond("lu", now), heldCond("lu", floor, hz), "("+delayedCond("lu", hz, waiting)+" OR "+heldCond("lu", now, floor)+")", parkedCond("lu", never),
		lu, oldest, t.Name, where, t.ID, p(3), waitingCond("lu", waiting, never))
}

// ScanEnd reads the id of the scan-th row that f selects, in id order (no
// row when there are fewer): the key alone, an index-only walk of scan
// entries.
func (d *Dialect) ScanEnd(t AdminTable, f AdminFilter, scan int) (Call, error) {
	where, args, err := d.where(t, f)
	if err != nil {
		return Call{}, err
	}
	return d.call(fmt.Sprintf("SELECT %s FROM %s WHERE %s ORDER BY %s LIMIT 1 OFFSET %d", t.ID, t.Name, where, t.ID, max(scan, 1)-1), args), nil
}

// ListRows lists the first limit rows that f selects, in id order: id,
// locked_until, attempts (0 without the column), last_error, created_at
// (NULL without theirs) and payload.
func (d *Dialect) ListRows(t AdminTable, f AdminFilter, limit int) (Call, error) {
	where, args, err := d.where(t, f)
	if err != nil {
		return Call{}, err
	}
	cols := strings.Join([]string{t.ID, t.LockedUntil, or(t.Attempts, "0"), or(t.LastError, "NULL"), or(t.CreatedAt, "NULL"), t.Payload}, ", ")
	return d.call(fmt.Sprintf("SELECT %s FROM %s WHERE %s ORDER BY %s LIMIT %d", cols, t.Name, where, t.ID, limit), args), nil
}

// Change is what an operator does to the rows it selects.
type Change int

const (
	// ChangeUnpark makes rows available again, their attempts reset where
	// the table counts them.
	ChangeUnpark Change = iota + 1
	// ChangeRunNow makes rows available now.
	ChangeRunNow
	// ChangeDelete deletes rows.
	ChangeDelete
)

// ChangeRows writes the statement that makes change c to the rows that f
// selects. Where the engine locks rows, a row a row-lock handler holds is
// in work whatever locked_until says: the statement skips it rather than
// wait for the handler to end.
func (d *Dialect) ChangeRows(t AdminTable, f AdminFilter, c Change) (Call, error) {
	where, args, err := d.changeWhere(t, f)
	if err != nil {
		return Call{}, err
	}
	var stmt string
	switch c {
	case ChangeUnpark:
		stmt = fmt.Sprintf("UPDATE %s SET %s = NULL", t.Name, t.LockedUntil)
		if t.Attempts != "" {
			stmt += fmt.Sprintf(", %s = 0", t.Attempts)
		}
	case ChangeRunNow:
		stmt = fmt.Sprintf("UPDATE %s SET %s = NULL", t.Name, t.LockedUntil)
	case ChangeDelete:
		stmt = "DELETE FROM " + t.Name
	default:
		return Call{}, fmt.Errorf("unknown change %d", c)
	}
	return d.call(stmt+" WHERE "+where, args), nil
}

// ParkRows writes the statement that parks the rows f selects, with
// lastError where the table keeps one (a cancel of rows not in work),
// skipping rows a row-lock handler holds as ChangeRows does.
func (d *Dialect) ParkRows(t AdminTable, f AdminFilter, lastError string) (Call, error) {
	where, args, err := d.changeWhere(t, f)
	if err != nil {
		return Call{}, err
	}
	args = append(args, t.Times.Encode(Never))
	stmt := fmt.Sprintf("UPDATE %s SET %s = $%d", t.Name, t.LockedUntil, len(args))
	if t.LastError != "" {
		args = append(args, lastError)
		stmt += fmt.Sprintf(", %s = $%d", t.LastError, len(args))
	}
	return d.call(stmt+" WHERE "+where, args), nil
}

// changeWhere is the WHERE clause of a change to the rows f selects (see
// ChangeRows).
func (d *Dialect) changeWhere(t AdminTable, f AdminFilter) (string, []any, error) {
	where, args, err := d.where(t, f)
	if err != nil {
		return "", nil, err
	}
	if lock := d.SkipLocked(); lock != "" {
		inner := fmt.Sprintf("SELECT %s FROM %s WHERE %s%s", t.ID, t.Name, where, lock)
		if d.Kind == MySQL {
			// MariaDB and MySQL refuse a subquery on the table a statement
			// changes, but not a derived table of it.
			inner = fmt.Sprintf("SELECT %s FROM (%s) AS s", t.ID, inner)
		}
		where = fmt.Sprintf("%s IN (%s)", t.ID, inner)
	}
	return where, args, nil
}

// call is a statement written with $n placeholders and its arguments in
// their order, in d's placeholders and the order d takes them.
func (d *Dialect) call(sql string, args []any) Call {
	sql, args = d.Bind(sql, args...)
	return Call{SQL: sql, Args: args}
}
