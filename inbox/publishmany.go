package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jmoiron/sqlx"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// sqliteBatchRows is the most rows one SQLite statement of a batch writes
// (fewer when the rows' parameters would pass dialect.MaxParams).
const sqliteBatchRows = 500

// PublishMany writes rows into q's table and returns their ids in the rows'
// order. Every row gets the same Delay or At. On Postgres it is one
// statement, one round trip however many rows (an insert from the unnest
// of one array per column); on SQLite one transaction of
// multi-row INSERTs. Either every row is written or none is. The queue's
// subscriptions are woken once, and with ListenNotify one notification is
// sent for the batch.
//
// On a table with keys (RoleKey), a row whose key is already queued, or
// given earlier in rows, is not written: its place among the ids holds the
// queued row's id, and the error beside the ids is a *DuplicateError
// (errors.Is(err, ErrDuplicate)); the other rows are written all the same.
//
// Generated ids are returned in the order the database gave them out,
// which is the rows' order: a table whose generated ids do not rise with
// each insert (a sequence with a negative step) gets them sorted.
func PublishMany[T any](ctx context.Context, b *Broker, q Queue[T], rows []T, opts ...PublishOption) ([]int64, error) {
	if len(rows) == 0 {
		return nil, nil
	}
	if err := b.writer.Lock(ctx); err != nil {
		return nil, fmt.Errorf("inbox: publish many to %q: waiting for the turn to write: %w", q.table, err)
	}
	ids, err := publishManyDB(ctx, b, q, rows, opts)
	b.writer.Unlock()
	if err != nil && !errors.Is(err, ErrDuplicate) {
		return nil, err
	}
	b.hub.Wake(q.table, q.group)
	return ids, err
}

func publishManyDB[T any](ctx context.Context, b *Broker, q Queue[T], rows []T, opts []PublishOption) ([]int64, error) {
	reserved := false
	if q.shape != nil && q.shape.column(RoleKey) != "" {
		r, err := b.reservation(ctx, b.db, q.table, q.shape)
		if err != nil {
			return nil, err
		}
		reserved = r != nil
	}
	if b.d.BatchArrays() && !reserved && !waits(opts) {
		// One statement: atomic on its own (with a history, its rows whose
		// keys the history holds are taken back in the transaction).
		return publishMany(ctx, b, b.db, q, rows, opts, true, sqlQuery(ctx, b.db), nil)
	}
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("inbox: publish many to %q: begin: %w", q.table, err)
	}
	ids, err := publishMany(ctx, b, tx, q, rows, opts, true, sqlQuery(ctx, tx), sqlExec(ctx, tx))
	if err != nil && !errors.Is(err, ErrDuplicate) {
		tx.Rollback()
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("inbox: publish many to %q: commit: %w", q.table, err)
	}
	return ids, err
}

// PublishManyTx is PublishMany inside the caller's transaction (a *sql.Tx,
// *sqlx.Tx or pgx.Tx): the rows are seen at its commit. Wakes as PublishTx
// does.
func PublishManyTx[T any](ctx context.Context, b *Broker, tx any, q Queue[T], rows []T, opts ...PublishOption) ([]int64, error) {
	if len(rows) == 0 {
		return nil, nil
	}
	var query queryFunc
	var exec execFunc
	var catalog dialect.Querier = b.db
	switch t := tx.(type) {
	case *sql.Tx:
		query, catalog, exec = sqlQuery(ctx, t), t, sqlExec(ctx, t)
	case *sqlx.Tx:
		query, catalog, exec = sqlQuery(ctx, t.Tx), t, sqlExec(ctx, t.Tx)
	case pgx.Tx:
		query = pgxQuery(ctx, t)
	default:
		return nil, fmt.Errorf("inbox: %w: PublishManyTx takes a *sql.Tx, *sqlx.Tx or pgx.Tx, got %T", ErrInvalid, tx)
	}
	opts = ackedParent(ctx, tx, opts)
	ids, err := publishMany(ctx, b, catalog, q, rows, opts, false, query, exec)
	if err != nil && !errors.Is(err, ErrDuplicate) {
		return nil, err
	}
	b.hub.Wake(q.table, q.group)
	return ids, err
}

// rowsIter is what a batch reads back: *sql.Rows or pgx.Rows.
type rowsIter interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

type queryFunc func(query string, args ...any) (rowsIter, error)

type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { r.Rows.Close() }

type pgxRows struct{ pgx.Rows }

func (r pgxRows) Scan(dest ...any) error { return r.Rows.Scan(dest...) }

func pgxQuery(ctx context.Context, t pgx.Tx) queryFunc {
	return func(q string, args ...any) (rowsIter, error) {
		r, err := t.Query(ctx, q, args...)
		if err != nil {
			return nil, err
		}
		return pgxRows{r}, nil
	}
}

func sqlQuery(ctx context.Context, db interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}) queryFunc {
	return func(q string, args ...any) (rowsIter, error) {
		r, err := db.QueryContext(ctx, q, args...)
		if err != nil {
			return nil, err
		}
		return sqlRows{r}, nil
	}
}

// batchPlan is what a table's batches need, read once per table and row
// type.
type batchPlan struct {
	batch  dialect.Batch
	fields []field // the fields written from each row, in Batch.Columns order
	times  dialect.Times
	// traceparent is one publish's trace context (set per call, not
	// cached): the trace column's value where a row's field is empty.
	traceparent string
}

func publishMany[T any](ctx context.Context, b *Broker, catalog dialect.Querier, q Queue[T], rows []T, opts []PublishOption, stamped bool, query queryFunc, exec execFunc) ([]int64, error) {
	if q.shape == nil {
		return nil, fmt.Errorf("inbox: %w: publish to a zero Queue: make it with NewQueue", ErrInvalid)
	}
	if q.group != "" && q.shape.column(RoleGroup) == "" {
		return nil, fmt.Errorf("inbox: publish to %q: %w: queue has group %q but %v tags no group column (`inbox:\"group\"`): add one, or publish to the queue without Group", q.table, ErrInvalid, q.group, q.shape.typ)
	}
	var cfg publishConfig
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.checkAfter(q.table); err != nil {
		return nil, err
	}
	plan, err := b.batchPlan(ctx, catalog, q.table, q.shape, q.group != "")
	if err != nil {
		return nil, err
	}
	var ds *dialect.DepsSQL
	if cfg.waits {
		if ds, err = b.publishDepsSQL(ctx, catalog, q.table, q.shape, plan.times); err != nil {
			return nil, fmt.Errorf("inbox: publish many to %q with After: %w", q.table, err)
		}
		if !cfg.acksParents() {
			cfg.at = dialect.Waiting
		}
	}
	ids, err := publishBatch(ctx, b, catalog, q, rows, cfg, plan, stamped, query, exec)
	if ds == nil || (err != nil && !errors.Is(err, ErrDuplicate)) {
		return ids, err
	}
	written := ids
	var dup *DuplicateError
	if errors.As(err, &dup) {
		written = nil
		for _, id := range ids {
			if !slices.Contains(dup.IDs, id) {
				written = append(written, id)
			}
		}
	}
	for _, id := range written {
		if werr := publishWaits(ds, q.table, id, &cfg, query, exec); werr != nil {
			return nil, werr
		}
	}
	return ids, err
}

// publishBatch writes a batch's rows (see publishMany).
func publishBatch[T any](ctx context.Context, b *Broker, catalog dialect.Querier, q Queue[T], rows []T, cfg publishConfig, plan batchPlan, stamped bool, query queryFunc, exec execFunc) ([]int64, error) {
	var err error
	offset, at := cfg.lockedUntil(plan.times, b.clock.Now())
	fixed := []any{offset}
	if plan.times.InDatabase {
		fixed = append(fixed, at)
	}
	if plan.batch.Notify {
		payload := q.group
		if stamped && len(q.group) < 7900 {
			payload = b.hub.Stamp(q.group)
		}
		fixed = append(fixed, q.table, payload)
	}
	if plan.batch.Group != "" {
		fixed = append(fixed, q.group)
	}
	var ids []returned
	plan.traceparent = b.traceparent(ctx, q.shape)
	if b.d.BatchArrays() {
		args := append(fixed, columnArrays(plan, rows)...)
		ids, err = readIDs(query, b.d.PublishMany(plan.batch, plan.times, len(rows)), args, len(rows), plan.batch.Key != "")
	} else if b.d.Returns() {
		ids, err = publishChunks(b.d, plan, rows, fixed, query)
	} else {
		ids, err = publishCounted(b.d, plan, rows, fixed, exec)
	}
	if err != nil {
		return nil, fmt.Errorf("inbox: publish many to %q: %w", q.table, err)
	}
	if plan.batch.Key != "" {
		r, err := b.reservation(ctx, catalog, q.table, q.shape)
		if err != nil {
			return nil, err
		}
		ids, kept, err := reserveBatch(r, ids, query, exec)
		if err != nil {
			return nil, fmt.Errorf("inbox: publish many to %q: %w", q.table, err)
		}
		return keyedIDs(b.d, q.table, q.shape, rows, ids, query, kept, r)
	}
	return orderedIDs(q, rows, ids)
}

// orderedIDs puts the ids of a batch without keys in the rows' order.
func orderedIDs[T any](q Queue[T], rows []T, got []returned) ([]int64, error) {
	ids := make([]int64, len(got))
	for i, r := range got {
		ids[i] = r.id
	}
	if len(ids) != len(rows) {
		return nil, fmt.Errorf("inbox: publish many to %q: %d rows written of %d", q.table, len(ids), len(rows))
	}
	if id := q.shape.byRole[RoleID]; !id.generated {
		// The rows carry their ids.
		for i := range rows {
			ids[i] = reflect.ValueOf(&rows[i]).Elem().FieldByIndex(id.index).Int()
		}
		return ids, nil
	}
	slices.Sort(ids)
	return ids, nil
}

// publishChunks writes rows on SQLite, as many a statement as its
// parameters allow, each full chunk by one prepared statement.
func publishChunks[T any](d *dialect.Dialect, plan batchPlan, rows []T, fixed []any, query queryFunc) ([]returned, error) {
	per := max(1, min(sqliteBatchRows, (dialect.MaxParams-len(fixed))/max(1, len(plan.fields))))
	ids := make([]returned, 0, len(rows))
	var full string
	for start := 0; start < len(rows); start += per {
		chunk := rows[start:min(start+per, len(rows))]
		text := full
		if len(chunk) < per || full == "" {
			text = d.PublishMany(plan.batch, plan.times, len(chunk))
			if len(chunk) == per {
				full = text
			}
		}
		args := append(slices.Clip(fixed), rowValues(plan, chunk)...)
		q, args := d.Bind(text, args...)
		got, err := readIDs(query, q, args, len(chunk), plan.batch.Key != "")
		if err != nil {
			return nil, err
		}
		ids = append(ids, got...)
	}
	return ids, nil
}

// returned is a row a batch wrote: its id, and its key where the table
// has keys.
type returned struct {
	id  int64
	key sql.NullString
}

func readIDs(query queryFunc, text string, args []any, n int, keyed bool) ([]returned, error) {
	r, err := query(text, args...)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	ids := make([]returned, 0, n)
	for r.Next() {
		var x returned
		dest := []any{&x.id}
		if keyed {
			dest = append(dest, &x.key)
		}
		if err := r.Scan(dest...); err != nil {
			return nil, err
		}
		ids = append(ids, x)
	}
	return ids, r.Err()
}

// columnArrays turns rows into one slice per field, of the field's type.
func columnArrays[T any](plan batchPlan, rows []T) []any {
	out := make([]any, len(plan.fields))
	for i, f := range plan.fields {
		if f.role == RoleTrace {
			traces := make([]*string, len(rows))
			for r := range rows {
				traces[r] = traceArg(reflect.ValueOf(&rows[r]).Elem().FieldByIndex(f.index), plan.traceparent)
			}
			out[i] = traces
			continue
		}
		if f.role == RoleKey {
			keys := make([]*string, len(rows))
			for r := range rows {
				if k, text := keyArg(reflect.ValueOf(&rows[r]).Elem().FieldByIndex(f.index)); k != nil {
					keys[r] = &text
				}
			}
			out[i] = keys
			continue
		}
		s := reflect.MakeSlice(reflect.SliceOf(f.typ), len(rows), len(rows))
		for r := range rows {
			s.Index(r).Set(reflect.ValueOf(&rows[r]).Elem().FieldByIndex(f.index))
		}
		out[i] = s.Interface()
	}
	return out
}

// rowValues lays rows' fields out row after row.
func rowValues[T any](plan batchPlan, rows []T) []any {
	out := make([]any, 0, len(plan.fields)*len(rows))
	for r := range rows {
		v := reflect.ValueOf(&rows[r]).Elem()
		for _, f := range plan.fields {
			if f.role == RoleTrace {
				out = append(out, traceArg(v.FieldByIndex(f.index), plan.traceparent))
				continue
			}
			if f.role == RoleKey {
				k, _ := keyArg(v.FieldByIndex(f.index))
				out = append(out, k)
				continue
			}
			out = append(out, v.FieldByIndex(f.index).Interface())
		}
	}
	return out
}

// batchPlan reads (once per table and row type) the columns a batch writes
// and, on Postgres, their types for the arrays.
func (b *Broker) batchPlan(ctx context.Context, catalog dialect.Querier, table string, s *shape, grouped bool) (batchPlan, error) {
	key := fmt.Sprintf("%s\x00%s\x00%t", table, s.typ, grouped)
	if p, ok := b.batches.Load(key); ok {
		return p.(batchPlan), nil
	}
	tm, err := b.times(ctx, catalog, table, s)
	if err != nil {
		return batchPlan{}, err
	}
	types := map[string]string{}
	if b.d.BatchArrays() {
		cols, err := b.d.Columns(ctx, catalog, table)
		if err != nil {
			return batchPlan{}, fmt.Errorf("inbox: %w", err)
		}
		for _, c := range cols {
			types[c.Name] = c.Type
		}
	}
	p := batchPlan{times: tm, batch: dialect.Batch{
		Table:       b.d.Quote(table),
		LockedUntil: b.d.Quote(s.column(RoleLockedUntil)),
		Returning:   []string{b.d.Quote(s.column(RoleID))},
		Notify:      b.notifies,
	}}
	if k := s.column(RoleKey); k != "" {
		p.batch.Key = b.d.Quote(k)
		p.batch.Returning = append(p.batch.Returning, p.batch.Key)
	}
	for _, f := range insertColumns(s) {
		if b.d.BatchArrays() && types[f.column] == "" {
			return batchPlan{}, &TableError{Table: table, Column: f.column, Problem: "is missing (or the table is)",
				Fix: fmt.Sprintf("migrations.Apply(ctx, db, %q), or add the column", table)}
		}
		if f.role == RoleGroup && grouped {
			p.batch.Group, p.batch.GroupType = b.d.Quote(f.column), types[f.column]
			continue
		}
		p.fields = append(p.fields, f)
		p.batch.Columns = append(p.batch.Columns, b.d.Quote(f.column))
		p.batch.Types = append(p.batch.Types, types[f.column])
	}
	b.batches.Store(key, p)
	return p, nil
}
