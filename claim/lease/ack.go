package lease

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/claim"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/internal/groupcommit"
)

// maxAckBatch bounds the rows one ack statement deletes.
const maxAckBatch = 1000

// ackLinger is the longest an ack waits for the acks of other jobs of its
// claimer still in work, so they share a statement. It paces statements,
// so it is host time. A claimer with no other job in work sends at once.
const ackLinger = time.Millisecond

// ackIdle is how long the acker's goroutine waits for more acks once it has
// sent all it had, before it ends. Under load the next acks come within a
// claim's round trip, and a goroutine started anew would grow its stack
// through the driver again for every batch.
const ackIdle = 100 * time.Millisecond

// ackFlushers is how many ack statements of one claimer may be in flight
// where the database is far: a second goes out only for a whole batch
// (maxAckBatch acks) queued while the first runs. Far from the database
// (5 ms each way, on a loaded machine) one statement of 1000 acks took
// 30-70 ms, the acks in flight reached their bound and workers waited on
// them with claimed rows waiting.
const ackFlushers = 2

// ackTimeout bounds one batched ack statement.
const ackTimeout = 30 * time.Second

// acker group-commits the acks of one claimer (see groupcommit): an ack
// that arrives while a statement is in flight waits for the next, which
// deletes every ack queued meanwhile in one statement; and while other
// jobs of the claimer are still in work, the first ack waits up to
// ackLinger for theirs. A lone ack (no other job in work) is sent at once
// as the single-row ack; under load a commit (a WAL flush on Postgres, the
// writer's lock on SQLite) is paid per batch instead of per row. Each row
// is still fenced on the lease its claim wrote, and each caller learns
// whether its own row was deleted.
//
// The linger matters most on SQLite, where a local statement is over before
// the next ack comes: without it each statement would carry a few rows.
type acker struct {
	c      *claimer
	commit *groupcommit.Committer[dialect.Fenced]
}

func newAcker(c *claimer) *acker {
	a := &acker{c: c}
	a.commit = groupcommit.New(groupcommit.Config[dialect.Fenced]{
		Flush: a.flush, Max: maxAckBatch, Linger: ackLinger, Idle: ackIdle, Flushers: a.flushers,
	})
	return a
}

// flushers is how many ack statements may be in flight: ackFlushers where
// the database is far (claim.FarRoundTrip, measured where writers run
// side by side), else one.
func (a *acker) flushers() int {
	if a.c.trip.RoundTrip() >= claim.FarRoundTrip {
		return ackFlushers
	}
	return 1
}

// claimed counts n more jobs in work: their acks are waited for.
func (a *acker) claimed(n int) { a.commit.Expect(n) }

// settled counts a job settled without an ack (retried, parked, released).
func (a *acker) settled() { a.commit.Drop() }

func (a *acker) ack(ctx context.Context, r dialect.Fenced) error {
	err := a.commit.Do(ctx, r)
	if err != nil && err == ctx.Err() { // the caller stopped waiting
		return fmt.Errorf("ack row %d of %q: %w", r.ID, a.c.env.Table.Unquoted, err)
	}
	return err
}

func (a *acker) flush(batch []dialect.Fenced, errs []error) {
	e := &a.c.env
	ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
	defer cancel()
	if len(batch) == 1 {
		errs[0] = a.ackOne(ctx, batch[0])
		return
	}
	// The batch statement tells which ids it deleted, not on which lease:
	// a second ack of one id (a stale holder's, beside the one that
	// reclaimed the row) goes alone, fenced on its own lease.
	// A map a flush, not one kept on the acker: a kept one holds the size
	// of its largest batch (up to maxAckBatch ids) in every subscription
	// that was ever busy, idle group subscriptions among them.
	many, alone := batch, []int(nil)
	seen := make(map[int64]bool, len(batch))
	for i, r := range batch {
		if seen[r.ID] {
			if alone == nil {
				many = slices.Clone(batch[:i])
			}
			alone = append(alone, i)
			continue
		}
		seen[r.ID] = true
		if alone != nil {
			many = append(many, r)
		}
	}
	var deleted map[int64]bool
	err := e.Writer.Lock(ctx)
	if err == nil {
		// A batch the database rolled back for a deadlock deleted
		// nothing: it is sent again (see conflictTries).
		for try := 1; ; try++ {
			deleted, err = a.deleteMany(ctx, many)
			if err == nil || try == conflictTries || !e.Dialect.Conflict(err) {
				break
			}
		}
		e.Writer.Unlock()
	}
	for i, r := range batch {
		switch {
		case len(alone) > 0 && alone[0] == i:
			alone = alone[1:]
			errs[i] = a.ackOne(ctx, r)
		case err != nil:
			errs[i] = fmt.Errorf("ack row %d of %q: %w", r.ID, e.Table.Unquoted, err)
		case !deleted[r.ID]:
			errs[i] = fmt.Errorf("ack row %d of %q: %w", r.ID, e.Table.Unquoted, claim.ErrLost)
		}
	}
}

// ackOne acks one row alone: deletes it, or moves it into the history.
func (a *acker) ackOne(ctx context.Context, r dialect.Fenced) error {
	e := &a.c.env
	if e.History == nil {
		return execFenced(ctx, e, "ack", r.ID, e.SQL.Ack.Call(r.ID, r.Lease))
	}
	if err := e.Writer.Lock(ctx); err != nil {
		return fmt.Errorf("ack row %d of %q: %w", r.ID, e.Table.Unquoted, err)
	}
	var moved map[int64]bool
	var err error
	// A move the database rolled back for a deadlock is sent again (see
	// conflictTries).
	for try := 1; ; try++ {
		moved, err = a.move(ctx, []dialect.Fenced{r})
		if err == nil || try == conflictTries || !e.Dialect.Conflict(err) {
			break
		}
	}
	e.Writer.Unlock()
	switch {
	case err != nil:
		return fmt.Errorf("ack row %d of %q: move it into the history: %w", r.ID, e.Table.Unquoted, err)
	case !moved[r.ID]:
		return fmt.Errorf("ack row %d of %q: %w", r.ID, e.Table.Unquoted, claim.ErrLost)
	}
	return nil
}

// move moves the batch into the history and returns the ids it moved. The
// caller holds the turn to write.
func (a *acker) move(ctx context.Context, batch []dialect.Fenced) (map[int64]bool, error) {
	e := &a.c.env
	begin := func(ctx context.Context) (*sql.Tx, error) { return e.DB.BeginTx(ctx, e.Dialect.HoldTx()) }
	return e.History.Move(ctx, e.Stmts, begin, batch, true, e.Clock.Now())
}

// deleteMany runs AckMany on the batch and returns the ids it deleted (or
// moved into the history).
func (a *acker) deleteMany(ctx context.Context, batch []dialect.Fenced) (map[int64]bool, error) {
	e := &a.c.env
	if e.History != nil {
		return a.move(ctx, batch)
	}
	q, err := e.SQL.AckMany.Call(batch)
	if err != nil {
		return nil, err
	}
	if !e.SQL.AckMany.Returns() {
		return a.deleteCounted(ctx, batch, q)
	}
	deleted := make(map[int64]bool, len(batch))
	return deleted, claim.ReadIDs(ctx, e.Stmts, q, deleted)
}

// deleteCounted is deleteMany where the delete returns no ids (MySQL 8):
// in a transaction that commits only when every row was deleted. Rows that
// lost their lease are rare; then each row is acked alone, whose count
// says whether it was.
func (a *acker) deleteCounted(ctx context.Context, batch []dialect.Fenced, q dialect.Call) (map[int64]bool, error) {
	e := &a.c.env
	tx, err := e.DB.BeginTx(ctx, e.Dialect.HoldTx())
	if err != nil {
		return nil, err
	}
	res, err := tx.ExecContext(ctx, q.SQL, q.Args...)
	if err != nil {
		tx.Rollback()
		return nil, err
	}
	deleted := make(map[int64]bool, len(batch))
	if n, err := res.RowsAffected(); err == nil && n == int64(len(batch)) {
		if err := tx.Commit(); err != nil {
			return nil, err
		}
		for _, r := range batch {
			deleted[r.ID] = true
		}
		return deleted, nil
	}
	if err := tx.Rollback(); err != nil {
		return nil, err
	}
	for _, r := range batch {
		one := e.SQL.Ack.Call(r.ID, r.Lease)
		res, err := e.Stmts.ExecContext(ctx, one.SQL, one.Args...)
		if err != nil {
			return nil, err
		}
		if n, err := res.RowsAffected(); err == nil && n == 1 {
			deleted[r.ID] = true
		}
	}
	return deleted, nil
}
