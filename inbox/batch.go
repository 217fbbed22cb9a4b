package inbox

import (
	"context"
	"errors"
	"fmt"
)

// Batch is what PublishBatch wrote: the batch's rows and its callback.
type Batch struct {
	// Rows are the ids of the batch's rows, in the rows' order (a row
	// whose key was already queued holds the queued row's id, which the
	// callback waits for too).
	Rows []int64
	// Callback is the id of the callback row: it waits (StateWaiting)
	// until every row of Rows is settled, acked or parked, then becomes
	// claimable once.
	Callback int64
}

// PublishBatch writes rows into q's table and one callback row, row of
// the queue callback, in one transaction: the callback becomes claimable
// exactly once, when every row of the batch has been acked or parked, and
// its handler reads how many were which with ParentsFrom. Its release is
// written by the subscription that settles the last row, right after that
// settlement commits, and a release lost to a crash between the two is
// found by the next sweep (within seconds; see After), so a batch whose
// last rows settle while instances are killed still calls back once.
//
// It is sugar over After: the callback is published with
// After(every row) and IfParentParked(RunChild). The callback lives in the
// batch's table (callback is q's table, in any group, of any row type):
// that table needs its edges (migrations.ApplyDependencies), and rows of
// a batch are claimed as any other rows of q, with any handler and form.
// opts apply to the batch's rows (Delay, At, After: a batch may itself
// wait for earlier rows); the callback takes none.
//
// Bounds: 1 to MaxParents rows; callback of q's table. A row whose key is
// already queued is not written (see PublishMany): the callback waits for
// the queued row, and the *DuplicateError is returned beside the Batch.
// A callback whose key is already queued writes nothing: PublishBatch
// returns that *DuplicateError with Callback the queued row's id.
func PublishBatch[T, C any](ctx context.Context, b *Broker, q Queue[T], rows []T, callback Queue[C], row C, opts ...PublishOption) (Batch, error) {
	if err := checkBatch(q, len(rows), callback); err != nil {
		return Batch{}, err
	}
	if err := b.writer.Lock(ctx); err != nil {
		return Batch{}, fmt.Errorf("inbox: publish a batch to %q: waiting for the turn to write: %w", q.table, err)
	}
	out, err := publishBatchDB(ctx, b, q, rows, callback, row, opts)
	b.writer.Unlock()
	if err != nil && !errors.Is(err, ErrDuplicate) {
		return out, err
	}
	if out.Rows != nil {
		b.hub.Wake(q.table, q.group)
	}
	return out, err
}

// publishBatchDB is PublishBatch's transaction.
func publishBatchDB[T, C any](ctx context.Context, b *Broker, q Queue[T], rows []T, callback Queue[C], row C, opts []PublishOption) (Batch, error) {
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return Batch{}, fmt.Errorf("inbox: publish a batch to %q: begin: %w", q.table, err)
	}
	defer tx.Rollback() // a no-op once committed
	out, err := publishBatchTx(ctx, b, tx, q, rows, callback, row, opts)
	if err != nil && (!errors.Is(err, ErrDuplicate) || out.Rows == nil) {
		// Failed, or the callback's key is queued: nothing is kept.
		return out, err
	}
	if cerr := tx.Commit(); cerr != nil {
		return Batch{}, fmt.Errorf("inbox: publish a batch to %q: commit: %w", q.table, cerr)
	}
	return out, err
}

// PublishBatchTx is PublishBatch inside the caller's transaction (a
// *sql.Tx, *sqlx.Tx or pgx.Tx): the batch and its callback are seen at its
// commit, or not at all. Wakes as PublishTx does. A callback whose key is
// already queued returns its *DuplicateError with Rows nil, the batch's
// rows written in tx: roll it back to publish nothing.
func PublishBatchTx[T, C any](ctx context.Context, b *Broker, tx any, q Queue[T], rows []T, callback Queue[C], row C, opts ...PublishOption) (Batch, error) {
	if err := checkBatch(q, len(rows), callback); err != nil {
		return Batch{}, err
	}
	return publishBatchTx(ctx, b, tx, q, rows, callback, row, opts)
}

func publishBatchTx[T, C any](ctx context.Context, b *Broker, tx any, q Queue[T], rows []T, callback Queue[C], row C, opts []PublishOption) (Batch, error) {
	ids, rowsErr := PublishManyTx(ctx, b, tx, q, rows, opts...)
	if rowsErr != nil && !errors.Is(rowsErr, ErrDuplicate) {
		return Batch{}, fmt.Errorf("inbox: publish a batch to %q: its rows: %w", q.table, rowsErr)
	}
	id, err := PublishTx(ctx, b, tx, callback, row, After(ids...), IfParentParked(RunChild))
	if err != nil {
		if errors.Is(err, ErrDuplicate) {
			return Batch{Callback: id}, err
		}
		return Batch{}, fmt.Errorf("inbox: publish a batch to %q: its callback: %w", q.table, err)
	}
	return Batch{Rows: ids, Callback: id}, rowsErr
}

// checkBatch refuses a batch of no rows, of more than MaxParents, or whose
// callback is in another table.
func checkBatch[T, C any](q Queue[T], n int, callback Queue[C]) error {
	switch {
	case n == 0:
		return fmt.Errorf("inbox: publish a batch to %q: %w: no rows: give at least one, or publish the callback alone", q.table, ErrInvalid)
	case n > MaxParents:
		return fmt.Errorf("inbox: publish a batch to %q: %w: %d rows; at most %d (MaxParents): split it, or chain batches with After", q.table, ErrInvalid, n, MaxParents)
	case callback.table != q.table:
		return fmt.Errorf("inbox: publish a batch to %q: %w: its callback is of table %q: the callback lives in the batch's table; give a queue of %q (any group)", q.table, ErrInvalid, callback.table, q.table)
	}
	return nil
}
