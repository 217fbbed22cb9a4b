package inbox

import (
	"context"
	"fmt"
	"reflect"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/internal/claim"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// ListParked lists the rows of q that failed their last attempt and were set
// aside (their locked_until is far in the future, so no claim takes them),
// in id order, with their attempts and last error where the struct tags
// those columns.
func ListParked[T any](ctx context.Context, b *Broker, q Queue[T]) ([]T, error) {
	t, stmts, err := adminSQL(ctx, b, q)
	if err != nil {
		return nil, err
	}
	call := stmts.Parked.Call(groupArg(q))
	rows, err := b.db.QueryContext(ctx, call.SQL, call.Args...)
	if err != nil {
		return nil, fmt.Errorf("inbox: list parked rows of %q: %w", q.table, err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		j, err := claim.ScanJob(t, rows.Scan)
		if err != nil {
			return nil, err
		}
		v := reflect.ValueOf(j.Value).Elem()
		q.shape.setLease(v, j.Lease)
		out = append(out, v.Interface().(T))
	}
	return out, rows.Err()
}

// Unpark makes parked rows of q available again, with their attempts reset
// where the table counts them, and wakes the queue's subscriptions, in
// every process that listens on Postgres. It returns how many rows it
// changed; ids that are not parked, and rows a row-lock handler holds, are
// left alone. It is Operator.Unpark of those ids.
func Unpark[T any](ctx context.Context, b *Broker, q Queue[T], ids ...int64) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	if q.shape == nil {
		return 0, fmt.Errorf("inbox: zero Queue: make it with NewQueue")
	}
	return NewOperator(b).Unpark(ctx, QueueRef{Table: q.table, Group: q.group, Roles: q.Roles()}, Selection{IDs: ids})
}

func adminSQL[T any](ctx context.Context, b *Broker, q Queue[T]) (claim.Table, dialect.InboxSQL, error) {
	if q.shape == nil {
		return claim.Table{}, dialect.InboxSQL{}, fmt.Errorf("inbox: zero Queue: make it with NewQueue")
	}
	t, err := checkTable(ctx, b, q.table, q.shape, q.group != "")
	if err != nil {
		return claim.Table{}, dialect.InboxSQL{}, err
	}
	t.Times.InDatabase = false // parked rows hold a fixed time, never now()
	return t, b.d.Inbox(t.Table, t.Times), nil
}

func groupArg[T any](q Queue[T]) any {
	if q.group == "" {
		return nil
	}
	return q.group
}

// Counts are a queue's rows by state.
type Counts struct {
	Available int64 // claimable now
	Held      int64 // leased, or delayed (a retry or a delayed publish)
	Parked    int64 // failed their last attempt; see ListParked
	Waiting   int64 // wait for their parents (see After)
}

// Count counts the rows of q by state, on the broker's clock.
func Count[T any](ctx context.Context, b *Broker, q Queue[T]) (Counts, error) {
	t, stmts, err := adminSQL(ctx, b, q)
	if err != nil {
		return Counts{}, err
	}
	t.Times.InDatabase = clock.InDatabase(b.clock)
	stmts = b.d.Inbox(t.Table, t.Times)
	var c Counts
	call := stmts.Count.Call(b.clock.Now(), groupArg(q))
	if err := b.db.QueryRowContext(ctx, call.SQL, call.Args...).
		Scan(&c.Available, &c.Held, &c.Parked, &c.Waiting); err != nil {
		return Counts{}, fmt.Errorf("inbox: count rows of %q: %w", q.table, err)
	}
	return c, nil
}
