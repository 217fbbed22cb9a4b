package inbox

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/sqlinbox/sqlinbox/internal/claim"
	"github.com/sqlinbox/sqlinbox/internal/claim/deps"
	"github.com/sqlinbox/sqlinbox/internal/claim/slots"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// TxHandler handles one row inside a transaction on the broker's pool (in
// the row-lock and advisory forms, on the connection that holds the row). The
// row's acknowledgement (its fenced delete) is made in the same
// transaction: return nil and the handler's writes and the ack commit
// together; return an error (or panic) and both roll back, and the row is
// retried as after any failure. A handler whose lease was taken over
// cannot commit: the fenced delete finds nothing, the transaction is rolled
// back, and the handling is reported lost. So an effect written to the
// same database happens once per row, although rows are delivered at
// least once.
//
// Don't commit or roll back tx yourself.
type TxHandler[T any] func(ctx context.Context, tx *sql.Tx, row T) error

// SubscribeTx is Subscribe for a TxHandler. It runs on every form. In the
// row-lock form the transaction given is the one that holds the row: the
// ack deletes the row and commits it, and a failure rolls the handler's
// writes back to a savepoint taken before it ran. In the advisory form it
// is a transaction on the session that holds the row's lock, unlocked once
// it has committed; each claim then takes one row, so each job in work
// holds a connection. On SQLite each handling holds the database's one
// write lock from its first statement to its commit, so handlings of a
// broker run one at a time there.
func SubscribeTx[T any](b *Broker, q Queue[T], h TxHandler[T], opts ...SubOption) (*Subscription, error) {
	if h == nil {
		return nil, fmt.Errorf("inbox: SubscribeTx to %q with a nil handler", q.table)
	}
	sub, err := Subscribe(b, q, func(context.Context, T) error { return nil }, opts...)
	if err != nil {
		return nil, err
	}
	sub.handleJob = func(ctx context.Context, j *claim.Job) error {
		ho := &handOff{to: sub.adopt}
		err := handleTx(ctx, b, j, ho, func(ctx context.Context, tx *sql.Tx) error { return h(ctx, tx, *j.Value.(*T)) })
		if err == nil && ho.step != nil {
			if e := sub.eng.Load(); e != nil {
				e.Adopt(ctx, []*claim.Job{ho.step})
			}
		}
		return err
	}
	return sub, nil
}

// HandleTx subscribes the transactional handler h to q on the service's
// broker and adds it (see TxHandler).
func HandleTx[T any](svc *Service, q Queue[T], h TxHandler[T], opts ...SubOption) (*Subscription, error) {
	sub, err := SubscribeTx(svc.broker, q, h, opts...)
	if err != nil {
		return nil, err
	}
	svc.Add(sub)
	return sub, nil
}

// handleTx runs h in a transaction, acks j in it and commits. The
// publishes in it share ho.
func handleTx(ctx context.Context, b *Broker, j *claim.Job, ho *handOff, h func(context.Context, *sql.Tx) error) (err error) {
	if j.Err != nil {
		return j.Err
	}
	st := deps.Unwrap(slots.Unwrap(j.Settler)) // the form's own, under a limit's slot and a release
	defer func() {
		if err != nil {
			ho.step = nil // rolled back with the transaction
		}
		if err == nil && ho.written.Load() {
			deps.HandedOff(slots.Unwrap(j.Settler))
		}
	}()
	if lender, ok := st.(claim.TxLender); ok {
		tx := lender.LendTx()
		return handleHeldTx(withAckTx(ctx, tx, j.ID, ho), tx, h)
	}
	acker, ok := st.(claim.TxAcker)
	if !ok {
		return fmt.Errorf("inbox: row %d: its claim form cannot ack inside a transaction", j.ID)
	}
	var tx *sql.Tx
	if tb, ok := st.(claim.TxBeginner); ok {
		// On the connection that holds the row (advisory); given back to
		// the form after the rollback or commit below.
		if tx, err = tb.BeginTx(ctx); err != nil {
			return fmt.Errorf("inbox: %w", err)
		}
		defer tb.EndTx()
	} else {
		// SQLite: the transaction takes the write lock at BEGIN
		// (immediate); the broker's other writers queue for their turn
		// meanwhile instead of meeting SQLITE_BUSY.
		if err := b.writer.Lock(ctx); err != nil {
			return err
		}
		defer b.writer.Unlock()
		if tx, err = b.db.BeginTx(ctx, nil); err != nil {
			return fmt.Errorf("inbox: row %d: begin the handler's transaction: %w", j.ID, err)
		}
	}
	done := false
	defer func() {
		if !done { // a panic: the engine recovers it and retries the row
			tx.Rollback()
		}
	}()
	if err := h(withAckTx(ctx, tx, j.ID, ho), tx); err != nil {
		done = true
		tx.Rollback()
		return err
	}
	if err := acker.AckTx(ctx, tx); err != nil {
		done = true
		tx.Rollback()
		acker.TxAborted()
		return err
	}
	done = true
	if err := tx.Commit(); err != nil {
		acker.TxAborted()
		return fmt.Errorf("inbox: row %d: commit the handler's transaction: %w", j.ID, err)
	}
	return nil
}

// handlerSavepoint is where a held row's transaction stood before its
// handler ran.
const handlerSavepoint = "inbox_handler"

// handleHeldTx runs h in the transaction that holds the row (row-lock
// form): its writes commit with the ack the engine makes next; on an
// error or a panic they are rolled back to a savepoint, and the retry the
// engine makes next commits alone.
func handleHeldTx(ctx context.Context, tx *sql.Tx, h func(context.Context, *sql.Tx) error) (err error) {
	if _, err := tx.ExecContext(ctx, dialect.Savepoint(handlerSavepoint)); err != nil {
		return fmt.Errorf("inbox: savepoint before the handler: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			// A panic or an error: undo the handler's writes. The row's
			// settlement is made next in the same transaction.
			if _, rerr := tx.ExecContext(context.WithoutCancel(ctx), dialect.RollbackTo(handlerSavepoint)); rerr != nil && err != nil {
				err = fmt.Errorf("%w (and rolling its writes back failed: %v)", err, rerr)
			}
		}
	}()
	if err := h(ctx, tx); err != nil {
		return err
	}
	ok = true
	return nil
}

// ackTx is the handler's transaction and the row whose ack commits with
// it, and what the publishes in it share (handOff).
type ackTx struct {
	tx *sql.Tx
	id int64
	ho *handOff
}

// handOff is what a HandleTx handling shares with the publishes in its
// transaction.
type handOff struct {
	// written is set once a step After the handled row alone is written:
	// it is available at the commit, so the settlement need not wait for
	// the row's release (deps.HandedOff).
	written atomic.Bool
	// to, where the subscription can take such a step as its own, says
	// how (nil: steps are written available, for any claim).
	to *adoptable
	// step is the first step to.adopter adopted, written leased to the
	// subscription: the engine takes it once the transaction commits.
	step *claim.Job
}

// adoptable is what a step needs to be written leased to a subscription,
// which then takes it with no claim (claim.Adopter): its queue, what its
// claim returns, its lease.
type adoptable struct {
	table, group string
	returning    string
	lease        time.Duration
	adopter      claim.Adopter
}

type ackTxKey struct{}

func withAckTx(ctx context.Context, tx *sql.Tx, id int64, ho *handOff) context.Context {
	return context.WithValue(ctx, ackTxKey{}, ackTx{tx: tx, id: id, ho: ho})
}

// ackedWith is the row whose ack commits with tx, when tx is the handler's
// transaction ctx was given with: a child published there with
// After(that row) needs no release, since the row is acked when the child
// is seen, and not at all when it is not (0 otherwise).
func ackedWith(ctx context.Context, tx any) (int64, *handOff) {
	a, ok := ctx.Value(ackTxKey{}).(ackTx)
	if !ok {
		return 0, nil
	}
	switch t := tx.(type) {
	case *sql.Tx:
		if t == a.tx {
			return a.id, a.ho
		}
	case *sqlx.Tx:
		if t.Tx == a.tx {
			return a.id, a.ho
		}
	}
	return 0, nil
}

// ackedParent adds to opts the row whose ack commits with tx, if any (see
// ackedWith).
func ackedParent(ctx context.Context, tx any, opts []PublishOption) []PublishOption {
	id, ho := ackedWith(ctx, tx)
	if id == 0 {
		return opts
	}
	return append(slices.Clone(opts), func(c *publishConfig) { c.ackedInTx, c.handOff = id, ho })
}
