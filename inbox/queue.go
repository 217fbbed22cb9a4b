package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jmoiron/sqlx"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// Queue is a table of rows of type T, or one group of it. T's fields name
// the columns in `db:"..."` tags and their roles in `inbox:"..."` tags:
//
//	type RenderInvoice struct {
//		ID          int64      `db:"id" inbox:"id,generated"`
//		LockedUntil *time.Time `db:"locked_until" inbox:"locked_until"`
//		Payload     []byte     `db:"payload" inbox:"payload"`
//		Attempts    int        `db:"attempts" inbox:"attempts"`
//	}
//
// Fields with a db tag and no role are read with every claim and written by
// Publish.
type Queue[T any] struct {
	table string
	group string
	shape *shape
}

// NewQueue describes table (an identifier, or schema.identifier) holding
// rows of type T. It checks T's tags and the name, not the database: a
// subscription checks the table itself before its first claim.
func NewQueue[T any](table string) (Queue[T], error) {
	if err := dialect.CheckTableName(table); err != nil {
		return Queue[T]{}, fmt.Errorf("inbox: table name: %w", err)
	}
	s, err := shapeOf(reflect.TypeFor[T]())
	if err != nil {
		return Queue[T]{}, err
	}
	return Queue[T]{table: table, shape: s}, nil
}

// MustQueue is NewQueue that panics on a bad name or bad tags: for queues
// declared at package level.
func MustQueue[T any](table string) Queue[T] {
	q, err := NewQueue[T](table)
	if err != nil {
		panic(err)
	}
	return q
}

// Group returns the queue of one group of the table: its subscriptions claim
// only rows of that group and its publishes write it. The struct must tag a
// group column.
func (q Queue[T]) Group(group string) Queue[T] {
	q.group = group
	return q
}

// Table is the queue's table name.
func (q Queue[T]) Table() string { return q.table }

// Roles returns the queue's columns by role, as its struct's tags name them.
func (q Queue[T]) Roles() map[Role]string {
	if q.shape == nil {
		return nil
	}
	roles := make(map[Role]string, len(q.shape.byRole))
	for r, f := range q.shape.byRole {
		roles[r] = f.column
	}
	return roles
}

// ID returns row's id, the field tagged inbox:"id" (0 for a zero Queue).
func (q Queue[T]) ID(row T) int64 {
	if q.shape == nil {
		return 0
	}
	v := reflect.ValueOf(row).FieldByIndex(q.shape.byRole[RoleID].index)
	if v.CanInt() {
		return v.Int()
	}
	return int64(v.Uint())
}

// GroupName is the queue's group, "" for the whole table.
func (q Queue[T]) GroupName() string { return q.group }

func (q Queue[T]) key() string { return q.table + "\x00" + q.group }

// PublishOption configures one publish.
type PublishOption func(*publishConfig)

type publishConfig struct {
	delay time.Duration
	at    time.Time // set by At; wins over delay
	// after are the parents After names; waits says After was given.
	after     []int64
	waits     bool
	policy    ParentPolicy
	policySet bool
	// ackedInTx is the row whose ack commits with the publish's
	// transaction (its HandleTx): as a parent it counts as acked.
	ackedInTx int64
	// handOff, with ackedInTx, is what the handling shares with the
	// publishes of its transaction (a step After that row alone is
	// recorded there, and may be written leased to the handler's
	// subscription).
	handOff *handOff
}

// Delay makes the row available only once d has passed on the broker's
// clock. Default: available at once. Bound: none; zero or negative is at
// once.
func Delay(d time.Duration) PublishOption {
	return func(c *publishConfig) { c.delay, c.at = d, time.Time{} }
}

// At makes the row available only from t on: t is written into locked_until
// as it is (to the column's precision), compared with the broker's clock
// like any lease; with clock.Database, with the database's now(). A t at or
// before now makes the row available at once. The last of Delay and At
// given wins. Default: available at once. Bound: none; the zero Time is at
// once.
func At(t time.Time) PublishOption {
	return func(c *publishConfig) { c.at, c.delay = t, 0 }
}

// lockedUntil returns the publish's locked_until parameters: the offset for
// Times.At (nil for none), and with the database clock the absolute time
// (nil for none), which the statement prefers.
func (c publishConfig) lockedUntil(tm dialect.Times, now time.Time) (offset, at any) {
	switch {
	case !c.at.IsZero() && tm.InDatabase:
		return nil, tm.Encode(c.at)
	case !c.at.IsZero():
		return tm.Encode(c.at), nil
	case c.delay > 0:
		return tm.Arg(now, c.delay), nil
	}
	return nil, nil
}

// Publish writes row into q's table and wakes the queue's subscriptions in
// this process at once (and, with ListenNotify, in every process). The id
// field is left to the database when tagged generated; locked_until is NULL,
// or now plus Delay; attempts, last_error and created_at take their defaults.
// It returns the new row's id.
func Publish[T any](ctx context.Context, b *Broker, q Queue[T], row T, opts ...PublishOption) (int64, error) {
	// A statement of its own: it takes the broker's turn to write on SQLite.
	if err := b.writer.Lock(ctx); err != nil {
		return 0, fmt.Errorf("inbox: publish to %q: waiting for the turn to write: %w", q.table, err)
	}
	id, err := publishDB(ctx, b, q, row, opts)
	b.writer.Unlock()
	if err != nil {
		if errors.Is(err, ErrDuplicate) {
			return id, err
		}
		return 0, err
	}
	b.hub.Wake(q.table, q.group)
	return id, nil
}

// publishDB is Publish's write: one statement, or on a table with keys
// and a history, a transaction (see publishKeyed).
func publishDB[T any](ctx context.Context, b *Broker, q Queue[T], row T, opts []PublishOption) (int64, error) {
	if waits(opts) {
		// The row and its edges commit together.
		return publishReserved(ctx, b, q, row, opts)
	}
	if q.shape != nil && q.shape.column(RoleKey) != "" {
		r, err := b.reservation(ctx, b.db, q.table, q.shape)
		if err != nil {
			return 0, err
		}
		if r != nil {
			return publishReserved(ctx, b, q, row, opts)
		}
	}
	return publish(ctx, b, b.db, q, row, opts, true, func(query string, args ...any) *sql.Row {
		return b.db.QueryRowContext(ctx, query, args...)
	}, sqlExec(ctx, b.db), sqlQuery(ctx, b.db))
}

// publishReserved is publishDB in a transaction of its own.
func publishReserved[T any](ctx context.Context, b *Broker, q Queue[T], row T, opts []PublishOption) (int64, error) {
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("inbox: publish to %q: begin: %w", q.table, err)
	}
	id, err := publish(ctx, b, tx, q, row, opts, true, func(query string, args ...any) *sql.Row {
		return tx.QueryRowContext(ctx, query, args...)
	}, sqlExec(ctx, tx), sqlQuery(ctx, tx))
	if err != nil && !errors.Is(err, ErrDuplicate) {
		tx.Rollback()
		return 0, err
	}
	if cerr := tx.Commit(); cerr != nil {
		return 0, fmt.Errorf("inbox: publish to %q: commit: %w", q.table, cerr)
	}
	return id, err
}

// PublishTx is Publish inside the caller's transaction: a *sql.Tx, *sqlx.Tx
// or pgx.Tx. The row is seen at commit. With ListenNotify the notification
// is delivered at commit and wakes every process; without it, this process's
// subscriptions are woken now, which on SQLite is enough (the claim waits for
// the writer's commit), and on Postgres a claim that runs before the commit
// misses the row until the next poll: call Broker.Wake after committing.
func PublishTx[T any](ctx context.Context, b *Broker, tx any, q Queue[T], row T, opts ...PublishOption) (int64, error) {
	var queryRow func(query string, args ...any) scanner
	var exec execFunc
	var query queryFunc
	// The catalog is read (once, SQLite only) inside the transaction: on
	// SQLite another connection would wait for the transaction's write lock.
	var catalog dialect.Querier = b.db
	switch t := tx.(type) {
	case *sql.Tx:
		queryRow = func(query string, args ...any) scanner { return t.QueryRowContext(ctx, query, args...) }
		catalog, exec, query = t, sqlExec(ctx, t), sqlQuery(ctx, t)
	case *sqlx.Tx:
		queryRow = func(query string, args ...any) scanner { return t.QueryRowContext(ctx, query, args...) }
		catalog, exec, query = t, sqlExec(ctx, t.Tx), sqlQuery(ctx, t.Tx)
	case pgx.Tx:
		// Postgres only, whose inserts return their ids: no exec.
		queryRow = func(query string, args ...any) scanner { return t.QueryRow(ctx, query, args...) }
		query = pgxQuery(ctx, t)
	default:
		return 0, fmt.Errorf("inbox: %w: PublishTx takes a *sql.Tx, *sqlx.Tx or pgx.Tx, got %T", ErrInvalid, tx)
	}
	opts = ackedParent(ctx, tx, opts)
	// Unstamped: this process's wake below may come before the commit, and
	// the notification, delivered at commit, is the wake that finds the row.
	id, err := publish(ctx, b, catalog, q, row, opts, false, func(query string, args ...any) scanner { return queryRow(query, args...) }, exec, query)
	if err != nil {
		if errors.Is(err, ErrDuplicate) {
			return id, err
		}
		return 0, err
	}
	if _, ho := ackedWith(ctx, tx); ho == nil || ho.step == nil || ho.step.ID != id {
		b.hub.Wake(q.table, q.group) // a step leased to the handler's subscription needs none
	}
	return id, nil
}

type scanner interface{ Scan(dest ...any) error }

// execFunc runs a statement that returns no rows.
type execFunc func(query string, args ...any) (sql.Result, error)

func sqlExec(ctx context.Context, db interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}) execFunc {
	return func(q string, args ...any) (sql.Result, error) { return db.ExecContext(ctx, q, args...) }
}

// insertedRow reads a publish's id where the insert returns no rows
// (MySQL 8: dialect.PublishSQL.Returns) as a RETURNING would be read: the
// generated id is the result's LastInsertId, a row that carries its id
// answers it, and a row not written (its key queued) is sql.ErrNoRows.
type insertedRow struct {
	res sql.Result
	err error
	own *int64 // the row's own id, where the id is not generated
}

func (r insertedRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	n, err := r.res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return sql.ErrNoRows
	}
	id := r.own
	if id == nil {
		last, err := r.res.LastInsertId()
		if err != nil {
			return err
		}
		id = &last
	}
	*(dest[0].(*int64)) = *id
	return nil
}

// publish writes row; with ListenNotify it notifies too, stamped (see
// notify.Hub.Stamp) when the caller wakes this process's hub after the
// commit.
func publish[T any, S scanner](ctx context.Context, b *Broker, catalog dialect.Querier, q Queue[T], row T, opts []PublishOption, stamped bool, queryRow func(string, ...any) S, exec execFunc, query queryFunc) (int64, error) {
	if q.shape == nil {
		return 0, fmt.Errorf("inbox: %w: publish to a zero Queue: make it with NewQueue", ErrInvalid)
	}
	if q.group != "" && q.shape.column(RoleGroup) == "" {
		return 0, fmt.Errorf("inbox: publish to %q: %w: queue has group %q but %v tags no group column (`inbox:\"group\"`): add one, or publish to the queue without Group", q.table, ErrInvalid, q.group, q.shape.typ)
	}
	var cfg publishConfig
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.checkAfter(q.table); err != nil {
		return 0, err
	}
	tm, err := b.times(ctx, catalog, q.table, q.shape)
	if err != nil {
		return 0, err
	}
	var ds *dialect.DepsSQL
	if cfg.waits {
		if ds, err = b.publishDepsSQL(ctx, catalog, q.table, q.shape, tm); err != nil {
			return 0, fmt.Errorf("inbox: publish to %q with After: %w", q.table, err)
		}
		if !cfg.acksParents() {
			cfg.at = dialect.Waiting
		}
	}
	// A step After the row its HandleTx acks, on Postgres: its edge is
	// written in the insert's statement.
	handOff := ds != nil && cfg.acksParents() && b.d.Kind == dialect.Postgres && q.shape.column(RoleKey) == ""
	var to *adoptable
	if handOff {
		to = cfg.adoptTo(q.table, q.group)
	}
	ins, fields := b.insertSQL(q.table, q.shape, tm, handOff, to)
	v := reflect.ValueOf(row)
	values := q.insertValues(v, fields, b.traceparent(ctx, q.shape))
	offset, at := cfg.lockedUntil(tm, b.clock.Now())
	if to != nil {
		offset = tm.Arg(b.clock.Now(), to.lease) // leased to the handler's subscription
	}
	payload := q.group
	// A payload must stay under Postgres's 8000 bytes: a group too long for
	// the stamp goes unstamped (its process is woken twice).
	if b.notifies && stamped && len(q.group) < 7900 {
		payload = b.hub.Stamp(q.group)
	}
	call := ins.Call(values, offset, at, q.table, payload)
	insert := func(query string, args ...any) scanner { return queryRow(query, args...) }
	if !ins.Returns() {
		if exec == nil {
			return 0, fmt.Errorf("inbox: publish to %q: %w: %s takes a *sql.Tx or *sqlx.Tx", q.table, ErrInvalid, b.d)
		}
		var own *int64
		if f := q.shape.byRole[RoleID]; !f.generated {
			id := v.FieldByIndex(f.index).Int()
			own = &id
		}
		insert = func(query string, args ...any) scanner {
			res, err := exec(query, args...)
			return insertedRow{res: res, err: err, own: own}
		}
	}
	if q.shape.column(RoleKey) != "" {
		r, err := b.reservation(ctx, catalog, q.table, q.shape)
		if err != nil {
			return 0, err
		}
		id, err := publishKeyed(b.d, q.table, q.shape, v, call, insert, func(query string, args ...any) scanner { return queryRow(query, args...) }, r, query, exec)
		if err != nil || ds == nil {
			return id, err
		}
		return id, publishWaits(ds, q.table, id, &cfg, query, exec)
	}
	var id int64
	if ins.HandsOff() {
		return cfg.writeStep(q.table, ins.HandOff(call, cfg.ackedInTx, int(cfg.policy)), to, func(query string, args ...any) scanner { return queryRow(query, args...) })
	}
	if ins.Returns() {
		err = queryRow(call.SQL, call.Args...).Scan(&id)
	} else {
		err = insert(call.SQL, call.Args...).Scan(&id)
	}
	if err != nil {
		return 0, fmt.Errorf("inbox: publish to %q: %w", q.table, err)
	}
	if ds != nil {
		return id, publishWaits(ds, q.table, id, &cfg, query, exec)
	}
	return id, nil
}

// insertValues are the values of row v's insert, one per field: the
// queue's group, the key as its column keeps it, the trace context.
func (q Queue[T]) insertValues(v reflect.Value, fields []field, traceparent string) []any {
	values := make([]any, 0, len(fields)+4)
	for _, f := range fields {
		switch {
		case f.role == RoleTrace:
			values = append(values, traceArg(v.FieldByIndex(f.index), traceparent))
		case f.role == RoleGroup && q.group != "":
			values = append(values, q.group)
		case f.role == RoleKey:
			k, _ := keyArg(v.FieldByIndex(f.index))
			values = append(values, k)
		default:
			values = append(values, v.FieldByIndex(f.index).Interface())
		}
	}
	return values
}

// traceparent is the trace context of a publish's ctx, "" when the broker
// has no WithTraceContext or the struct tags no trace column.
func (b *Broker) traceparent(ctx context.Context, s *shape) string {
	if b.trace == nil || s.byRole[RoleTrace] == nil {
		return ""
	}
	return b.trace(ctx)
}

// traceArg is the trace column's parameter: the row's own value when it
// has one, else the publish's traceparent, else NULL.
func traceArg(v reflect.Value, traceparent string) *string {
	if _, text := keyArg(v); text != "" {
		return &text
	}
	if traceparent != "" {
		return &traceparent
	}
	return nil
}

// times is how table keeps locked_until, read from the catalog once.
func (b *Broker) times(ctx context.Context, catalog dialect.Querier, table string, s *shape) (dialect.Times, error) {
	b.mu.Lock()
	tm, ok := b.encodings[table]
	b.mu.Unlock()
	if ok {
		return tm, nil
	}
	// The publish statement a table's first publish writes is kept: it is
	// written for the server the pool reaches (MariaDB's RETURNING or not).
	if err := b.d.Probe(ctx, catalog); err != nil {
		return tm, fmt.Errorf("inbox: %w", err)
	}
	tm = dialect.Times{Kind: b.d.Kind, Encoding: dialect.EncodingFor(b.d.Kind, ""), InDatabase: clock.InDatabase(b.clock)}
	if b.d.EncodingDeclared() {
		cols, err := b.d.Columns(ctx, catalog, table)
		if err != nil {
			return tm, fmt.Errorf("inbox: %w", err)
		}
		found := false
		for _, c := range cols {
			if c.Name == s.column(RoleLockedUntil) {
				tm.Encoding = dialect.EncodingFor(b.d.Kind, c.Type)
				found = true
			}
		}
		if !found {
			// Nothing cached: the table may be created later, with either
			// encoding.
			return tm, &TableError{Table: table, Column: s.column(RoleLockedUntil), Problem: "is missing (or the table is)",
				Fix: fmt.Sprintf("migrations.Apply(ctx, db, %q), or add the column", table)}
		}
	}
	b.mu.Lock()
	b.encodings[table] = tm
	b.mu.Unlock()
	return tm, nil
}

// insertSQL builds (once per table and row type) the publish statement
// and the fields it writes, in order.
func (b *Broker) insertSQL(table string, s *shape, tm dialect.Times, handOff bool, to *adoptable) (dialect.PublishSQL, []field) {
	key := table + "\x00" + s.typ.String()
	edges, held := "", ""
	if handOff {
		key += "\x00handoff"
		edges = b.d.Quote(dialect.DepsName(table))
	}
	if to != nil {
		held = to.returning
		key += "\x00held\x00" + held
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	ins, ok := b.inserts[key]
	if !ok {
		fields := insertColumns(s)
		cols := make([]string, len(fields))
		for i, f := range fields {
			cols[i] = b.d.Quote(f.column)
		}
		ins = insert{fields: fields, stmt: b.d.Publish(dialect.Insert{
			Table:       b.d.Quote(table),
			Columns:     cols,
			LockedUntil: b.d.Quote(s.column(RoleLockedUntil)),
			ID:          b.d.Quote(s.column(RoleID)),
			Key:         quoteOpt(b.d, s.column(RoleKey)),
			Notify:      b.notifies,
			HandOff:     edges,
			Held:        held,
			Attempts:    quoteOpt(b.d, s.column(RoleAttempts)),
		}, tm)}
		b.inserts[key] = ins
	}
	return ins.stmt, ins.fields
}

type insert struct {
	stmt   dialect.PublishSQL
	fields []field
}

// quoteOpt quotes an optional column, "" staying "".
func quoteOpt(d *dialect.Dialect, col string) string {
	if col == "" {
		return ""
	}
	return d.Quote(col)
}

func insertColumns(s *shape) []field {
	var out []field
	for _, f := range s.fields {
		switch {
		case f.role == RoleID && f.generated, f.role == RoleLockedUntil, f.role == RoleAttempts, f.role == RoleLastError, f.role == RoleCreatedAt:
			continue
		}
		out = append(out, f)
	}
	return out
}
