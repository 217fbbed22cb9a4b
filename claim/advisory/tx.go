package advisory

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/sqlinbox/sqlinbox/internal/claim"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// BeginTx opens the handler's transaction on the connection that holds the
// row's lock (see claim.TxBeginner): should the session end, the lock and
// the transaction end together, so the row's delete cannot commit after
// another session took the row. The connection is the transaction's alone
// until EndTx: a transactional subscription claims one row per connection,
// and that job's settlement comes after EndTx.
func (h *held) BeginTx(ctx context.Context) (*sql.Tx, error) {
	p := h.p
	p.mu.Lock()
	alone := p.refs == 1 && !h.done
	p.mu.Unlock()
	if !alone {
		return nil, fmt.Errorf("row %d of %q (advisory): its claim's connection is shared with other jobs, so a transaction cannot have it (the claim was not made for a transactional handler)", h.id, p.c.env.Table.Unquoted)
	}
	p.watch.Pause()
	tx, err := p.conn.BeginTx(ctx, nil)
	if err != nil {
		p.watch.Start()
		return nil, fmt.Errorf("row %d of %q (advisory): begin the handler's transaction: %w", h.id, p.c.env.Table.Unquoted, err)
	}
	return tx, nil
}

// EndTx gives the connection back to the watch once the handler's
// transaction has ended; the settlement that follows pauses it again.
func (h *held) EndTx() { h.p.watch.Start() }

// AckTx deletes the row inside tx; the unlock waits for the Ack that
// follows the commit, so no other session can lock the row while the
// delete may still roll back.
func (h *held) AckTx(ctx context.Context, tx *sql.Tx) error {
	e := &h.p.c.env
	if e.History != nil {
		moved, err := e.History.Move(ctx, tx, nil, []dialect.Fenced{h.moved()}, false, e.Clock.Now())
		if err != nil {
			return fmt.Errorf("ack row %d of %q (advisory) in the handler's transaction: move it into the history: %w", h.id, e.Table.Unquoted, err)
		}
		if !moved[h.id] {
			return fmt.Errorf("ack row %d of %q (advisory) in the handler's transaction: %w", h.id, e.Table.Unquoted, claim.ErrLost)
		}
		h.p.mu.Lock()
		h.inTx = true
		h.p.mu.Unlock()
		return nil
	}
	q := e.SQL.Delete.Call(h.id)
	res, err := tx.ExecContext(ctx, q.SQL, q.Args...)
	if err != nil {
		return fmt.Errorf("ack row %d of %q (advisory) in the handler's transaction: %w", h.id, e.Table.Unquoted, err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		// Deleted by someone who ignores the lock.
		return fmt.Errorf("ack row %d of %q (advisory) in the handler's transaction: %w", h.id, e.Table.Unquoted, claim.ErrLost)
	}
	h.p.mu.Lock()
	h.inTx = true
	h.p.mu.Unlock()
	return nil
}

// TxAborted says the transaction of AckTx did not commit: the row is
// settled as any other.
func (h *held) TxAborted() {
	h.p.mu.Lock()
	h.inTx = false
	h.p.mu.Unlock()
}

// ackedInTx reports whether the handler's transaction deleted the row, so
// that its Ack only unlocks it.
func (h *held) ackedInTx() bool {
	h.p.mu.Lock()
	defer h.p.mu.Unlock()
	return h.inTx
}
