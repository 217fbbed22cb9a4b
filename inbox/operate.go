package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// Operator reads and changes queues the way an operator does: by table
// and group, with the column roles the registry holds (or given), never a
// Go type. The inbox command is built on it.
//
//	op := inbox.NewOperator(broker)
//	n, err := op.Unpark(ctx, inbox.QueueRef{Table: "invoice_jobs"}, inbox.Selection{All: true})
type Operator struct {
	b   *Broker
	sql dialect.RegistrySQL
	// CountLimit bounds the rows Queue reads to count a queue by state: the
	// first CountLimit rows in id order, so the count costs the same on a
	// table of ten million rows as on one of a hundred thousand; a count
	// that reached it says so (QueueState.Capped). Defaults to
	// DefaultCountLimit.
	CountLimit int
}

// DefaultCountLimit is Operator.CountLimit's default.
const DefaultCountLimit = 100_000

// heldFloor: rows due within a heldFloor-th of the lease are delayed, not
// held (see Operator.filter).
const heldFloor = 6

// NewOperator returns an operator on broker b's database.
func NewOperator(b *Broker) *Operator {
	return &Operator{b: b, sql: b.d.Registry(), CountLimit: DefaultCountLimit}
}

// QueueRef names a queue: a table, or one group of it, and its columns by
// role. Roles nil means the reference table's (migrations.Apply).
type QueueRef struct {
	Table string
	Group string // "" for the whole table
	Roles map[Role]string
	// Lease separates held rows (locked_until after a sixth of a lease
	// from now, and within a lease) from delayed ones. Defaults to
	// DefaultLease.
	Lease time.Duration
}

// ReferenceRoles are the columns of the reference table by role.
func ReferenceRoles() map[Role]string {
	return map[Role]string{RoleID: "id", RoleLockedUntil: "locked_until", RolePayload: "payload", RoleGroup: "group_name",
		RoleAttempts: "attempts", RoleLastError: "last_error", RoleCreatedAt: "created_at"}
}

// adminTable checks ref's table with a shape made from its roles.
func (o *Operator) adminTable(ctx context.Context, ref QueueRef) (dialect.AdminTable, error) {
	roles := ref.Roles
	if roles == nil {
		roles = ReferenceRoles()
	}
	types := map[Role]reflect.Type{RoleID: reflect.TypeFor[int64](), RoleLockedUntil: reflect.TypeFor[*time.Time](),
		RolePayload: reflect.TypeFor[[]byte](), RoleGroup: reflect.TypeFor[string](), RoleAttempts: reflect.TypeFor[int64](),
		RoleLastError: reflect.TypeFor[*string](), RoleCreatedAt: reflect.TypeFor[*time.Time]()}
	var fields []reflect.StructField
	for i, r := range []Role{RoleID, RoleLockedUntil, RolePayload, RoleGroup, RoleAttempts, RoleLastError, RoleCreatedAt} {
		col, ok := roles[r]
		if !ok || col == "" {
			continue
		}
		fields = append(fields, reflect.StructField{Name: fmt.Sprintf("F%d", i), Type: types[r],
			Tag: reflect.StructTag(fmt.Sprintf(`db:%q inbox:%q`, col, string(r)))})
	}
	s, err := shapeOf(reflect.StructOf(fields))
	if err != nil {
		return dialect.AdminTable{}, err
	}
	if err := dialect.CheckTableName(ref.Table); err != nil {
		return dialect.AdminTable{}, fmt.Errorf("inbox: table name: %w", err)
	}
	t, err := checkTable(ctx, o.b, ref.Table, s, s.column(RoleGroup) != "")
	if err != nil {
		return dialect.AdminTable{}, err
	}
	at := dialect.AdminTable{Table: t.Table, Times: t.Times, Payload: o.b.d.Quote(s.column(RolePayload))}
	at.Times.InDatabase = false
	if c := s.column(RoleCreatedAt); c != "" {
		at.CreatedAt = o.b.d.Quote(c)
	}
	return at, nil
}

func (o *Operator) filter(ref QueueRef) dialect.AdminFilter {
	now := o.b.clock.Now()
	lease := ref.Lease
	if lease == 0 {
		lease = DefaultLease
	}
	// A handler's lease is extended when a third of it is left, so a row in
	// work is due more than a sixth of it from now, its extension late by
	// up to a sixth too; a row due sooner waits out a retry.
	f := dialect.AdminFilter{Now: now, Floor: now.Add(lease / heldFloor), Horizon: now.Add(lease)}
	if ref.Group != "" {
		g := ref.Group
		f.Group = &g
	}
	return f
}

// QueueState is a queue's rows by state (see the State constants).
type QueueState struct {
	Available, Held, Delayed, Parked int64
	// Waiting counts rows that wait for their parents (see After).
	Waiting int64
	// Oldest is the oldest available row's created_at (its locked_until
	// where the table has no created_at; zero when none is known).
	Oldest time.Time
	// Capped: the count read Operator.CountLimit rows and stopped; the
	// counts are of the first rows in id order, lower bounds of the
	// table's.
	Capped bool
}

// States of a row, as Rows filters them and QueueState counts them.
const (
	StateAvailable = dialect.StateAvailable // claimable now
	StateHeld      = dialect.StateHeld      // due after a sixth of a lease from now, within a lease: in work
	StateDelayed   = dialect.StateDelayed   // due sooner, or further off: a retry's backoff or a delayed publish
	StateParked    = dialect.StateParked    // failed its last attempt; see Unpark
	// StateWaiting is a row that waits for its parents (After): its
	// locked_until holds a fixed far time, before the one of a parked row.
	StateWaiting = dialect.StateWaiting
)

// State counts ref's rows by state.
func (o *Operator) State(ctx context.Context, ref QueueRef) (QueueState, error) {
	t, err := o.adminTable(ctx, ref)
	if err != nil {
		return QueueState{}, err
	}
	return o.countStates(ctx, ref, t, o.filter(ref), "rows")
}

// countStates counts, by state, the rows of ref's table f picks (over at
// most CountLimit rows in id order); what names them in an error.
func (o *Operator) countStates(ctx context.Context, ref QueueRef, t dialect.AdminTable, f dialect.AdminFilter, what string) (QueueState, error) {
	count, err := o.b.d.CountStates(t, f)
	if err != nil {
		return QueueState{}, fmt.Errorf("inbox: table %q: %w", ref.Table, err)
	}
	limit := o.CountLimit
	if limit <= 0 {
		limit = DefaultCountLimit
	}
	q := count.Call(f.Now, f.Horizon, limit)
	var st QueueState
	var oldest any
	var scanned int64
	if err := o.b.db.QueryRowContext(ctx, q.SQL, q.Args...).Scan(&st.Available, &st.Held, &st.Delayed, &st.Parked, &st.Waiting, &oldest, &scanned); err != nil {
		return QueueState{}, fmt.Errorf("inbox: count %s of %q: %w", what, ref.Table, err)
	}
	st.Capped = scanned >= int64(limit)
	if at, ok, err := t.Times.Decode(oldest); err == nil && ok {
		st.Oldest = at
	}
	return st, nil
}

// Row is one row as an operator sees it.
type Row struct {
	ID          int64
	State       string
	LockedUntil time.Time // zero when NULL
	Attempts    int64
	LastError   string
	Created     time.Time // zero without a created_at column
	Payload     []byte
	// Handled, HandledBy and Took are a done row's (StateDone): when its
	// ack moved it into the history, the instance that acked it, and how
	// long from its claim to its ack. Zero in other states.
	Handled   time.Time
	HandledBy string
	Took      time.Duration
}

// RowFilter picks the rows Rows lists.
type RowFilter struct {
	States []string // nil for every state but done
	Limit  int      // default 100
	IDs    []int64  // nil for every id
	// After lists rows with an id above it, for the next page; zero lists
	// from the first row. Not for done rows (see HandledBefore).
	After int64
	// ErrorContains keeps rows whose last error holds it ("" for any).
	ErrorContains string
	// Key, for done rows, keeps the rows of this key (the column
	// Roles[RoleKey] names).
	Key string
	// HandledFrom and HandledBefore, for done rows, keep the rows handled
	// at or after the one and before the other (zero: no bound); the next
	// page of done rows is HandledBefore the last row's Handled.
	HandledFrom, HandledBefore time.Time
}

// Rows lists ref's rows in id order; done rows (States {StateDone}: acked
// and kept in the table's history, see History), the most recently handled
// first.
func (o *Operator) Rows(ctx context.Context, ref QueueRef, rf RowFilter) ([]Row, error) {
	t, err := o.adminTable(ctx, ref)
	if err != nil {
		return nil, err
	}
	if slices.Contains(rf.States, StateDone) {
		if len(rf.States) > 1 {
			return nil, fmt.Errorf("inbox: rows of %q: done rows are in the history, listed alone: ask for %q or for the other states", ref.Table, StateDone)
		}
		return o.listDone(ctx, ref, t, rf)
	}
	return o.list(ctx, ref, t, rf, nil)
}

// ScanRows lists, as Rows does, ref's rows that match rf, but reads at most
// scan rows in id order after rf.After: a view of a rare state (a hundred
// parked rows among millions) costs a bounded read, with no index on
// locked_until (which would keep claims from updating in place). It also
// returns the id of the last row read, where the next scan starts, or zero
// when the read reached the end of the queue.
func (o *Operator) ScanRows(ctx context.Context, ref QueueRef, rf RowFilter, scan int) ([]Row, int64, error) {
	t, err := o.adminTable(ctx, ref)
	if err != nil {
		return nil, 0, err
	}
	f := o.filter(ref)
	if rf.After != 0 {
		f.After = &rf.After
	}
	q, err := o.b.d.ScanEnd(t, f, scan)
	if err != nil {
		return nil, 0, fmt.Errorf("inbox: table %q: %w", ref.Table, err)
	}
	var through int64
	if err := o.b.db.QueryRowContext(ctx, q.SQL, q.Args...).Scan(&through); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, 0, fmt.Errorf("inbox: scan rows of %q: %w", ref.Table, err)
	}
	bound := &through
	if through == 0 {
		bound = nil // fewer than scan rows left: read to the end
	}
	rows, err := o.list(ctx, ref, t, rf, bound)
	return rows, through, err
}

// list runs Rows, over ids up to through when it is not nil.
func (o *Operator) list(ctx context.Context, ref QueueRef, t dialect.AdminTable, rf RowFilter, through *int64) ([]Row, error) {
	f := o.filter(ref)
	f.States, f.IDs, f.Through, f.ErrorContains = rf.States, rf.IDs, through, rf.ErrorContains
	if rf.After != 0 {
		f.After = &rf.After
	}
	limit := rf.Limit
	if limit <= 0 {
		limit = 100
	}
	q, err := o.b.d.ListRows(t, f, limit)
	if err != nil {
		return nil, fmt.Errorf("inbox: table %q: %w", ref.Table, err)
	}
	rows, err := o.b.db.QueryContext(ctx, q.SQL, q.Args...)
	if err != nil {
		return nil, fmt.Errorf("inbox: list rows of %q: %w", ref.Table, err)
	}
	defer rows.Close()
	var out []Row
	for rows.Next() {
		var r Row
		var lu, created any
		var lastErr sql.NullString
		if err := rows.Scan(&r.ID, &lu, &r.Attempts, &lastErr, &created, &r.Payload); err != nil {
			return nil, fmt.Errorf("inbox: list rows of %q: %w", ref.Table, err)
		}
		r.LastError = lastErr.String
		var set bool
		r.LockedUntil, set, _ = t.Times.Decode(lu)
		r.Created, _, _ = t.Times.Decode(created)
		r.State = dialect.StateIn(r.LockedUntil, set, f.Now, f.Floor, f.Horizon)
		out = append(out, r)
	}
	return out, rows.Err()
}

// Selection picks the rows Unpark, RunNow and Delete change: by id, or
// every row (All), narrowed by ErrorContains.
type Selection struct {
	IDs           []int64
	All           bool
	ErrorContains string
}

func (s Selection) check() error {
	if len(s.IDs) == 0 && !s.All && s.ErrorContains == "" {
		return fmt.Errorf("inbox: select rows by id, by an error's text, or all of them")
	}
	return nil
}

// Unpark makes ref's parked rows in sel available again, with attempts
// reset where the table counts them, and wakes its subscriptions. It
// returns how many rows changed. The cancel requests (Cancel) of the
// table's parked rows are cleared first.
func (o *Operator) Unpark(ctx context.Context, ref QueueRef, sel Selection) (int64, error) {
	return o.change(ctx, ref, sel, StateParked, "unpark", dialect.ChangeUnpark)
}

// RunNow makes ref's delayed rows in sel due now and wakes its
// subscriptions. Held rows (due after a sixth of a lease from now, within a
// lease) are left alone: they may be in work. A row in work whose lease's
// extension is late by more than a sixth of the lease counts as delayed.
func (o *Operator) RunNow(ctx context.Context, ref QueueRef, sel Selection) (int64, error) {
	return o.change(ctx, ref, sel, StateDelayed, "run now", dialect.ChangeRunNow)
}

// Delete deletes ref's rows in sel that are available, delayed, waiting or
// parked; held rows (perhaps in work) are left alone. On a table with edges
// (<table>_deps, see After) the deleted rows' edges as child go with them;
// their children count the deletion as an ack (docs/workflows.md). On Postgres so are rows a
// row-lock handler holds, whatever their locked_until; a row an advisory
// handler holds cannot be told from its columns, so deleting it under a
// running handler makes that handling's ack change nothing.
func (o *Operator) Delete(ctx context.Context, ref QueueRef, sel Selection) (int64, error) {
	return o.change(ctx, ref, sel, "", "delete", dialect.ChangeDelete)
}

func (o *Operator) change(ctx context.Context, ref QueueRef, sel Selection, state, what string, c dialect.Change) (int64, error) {
	if err := sel.check(); err != nil {
		return 0, err
	}
	t, err := o.adminTable(ctx, ref)
	if err != nil {
		return 0, err
	}
	f := o.filter(ref)
	f.IDs, f.ErrorContains = sel.IDs, sel.ErrorContains
	f.States = []string{state}
	if state == "" {
		f.States = []string{StateAvailable, StateDelayed, StateWaiting, StateParked}
	}
	q, err := o.b.d.ChangeRows(t, f, c)
	if err != nil {
		return 0, fmt.Errorf("inbox: %s rows of %q: %w", what, ref.Table, err)
	}
	if c == dialect.ChangeUnpark {
		// A parked row's cancel request is done with: one left behind
		// would cancel the row's next handling.
		if err := o.pruneCancels(ctx, t, ref.Table); err != nil {
			return 0, fmt.Errorf("inbox: %s rows of %q: clear their cancel requests: %w", what, ref.Table, err)
		}
	}
	n, err := o.changed(ctx, q)
	if err != nil {
		return 0, fmt.Errorf("inbox: %s rows of %q: %w", what, ref.Table, err)
	}
	if n > 0 && c == dialect.ChangeDelete {
		// The deleted rows' edges as children (<table>_deps) go with them.
		if err := o.pruneDeps(ctx, t); err != nil {
			return n, fmt.Errorf("inbox: %s rows of %q: %d deleted; delete their edges in %s: %w", what, ref.Table, n, dialect.DepsName(ref.Table), err)
		}
	}
	if n > 0 && state != "" {
		o.wake(ctx, ref.Table, ref.Group)
	}
	return n, nil
}

// wake wakes the subscriptions of table (and group) in this process and,
// on Postgres, in every process that listens (ListenNotify).
func (o *Operator) wake(ctx context.Context, channel, key string) {
	o.b.hub.Wake(channel, key)
	if n := o.b.d.Notify(); n.SQL() != "" {
		q := n.Call(channel, key)
		_, _ = o.b.db.ExecContext(ctx, q.SQL, q.Args...)
	}
}

// TableColumn is a column of a table as the database's catalog describes
// it.
type TableColumn struct {
	Name       string
	Type       string // as declared, lower case
	PrimaryKey bool   // part of the primary key
}

// Columns reads table's columns from the database's catalog, in order;
// none when the table does not exist. A tool that names a table nobody
// registered reads them to tell a missing table from a typo, and a
// table's own columns from the reference table's.
func (o *Operator) Columns(ctx context.Context, table string) ([]TableColumn, error) {
	if err := dialect.CheckTableName(table); err != nil {
		return nil, fmt.Errorf("inbox: table name: %w", err)
	}
	cols, err := o.b.d.Columns(ctx, o.b.db, table)
	if err != nil {
		return nil, fmt.Errorf("inbox: table %q: %w", table, err)
	}
	out := make([]TableColumn, 0, len(cols))
	for _, c := range cols {
		out = append(out, TableColumn{Name: c.Name, Type: c.Type, PrimaryKey: c.PK})
	}
	return out, nil
}

// changed runs an operator's change to rows and says how many it changed.
func (o *Operator) changed(ctx context.Context, q dialect.Call) (int64, error) {
	var n int64
	err := o.b.write(ctx, false, func(ex execer) error {
		res, err := ex.ExecContext(ctx, q.SQL, q.Args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}
