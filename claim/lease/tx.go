package lease

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/sqlinbox/sqlinbox/internal/claim"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// AckTx deletes the row, fenced on its lease, inside tx (see
// claim.TxAcker). The lease is read as the last extension left it; an
// extension that lands between that read and the delete makes the delete
// find nothing, which is reported as lost (the handling is rolled back and
// the row handled again): never a commit on a lease that does not stand.
func (s *settler) AckTx(ctx context.Context, tx *sql.Tx) error {
	s.mu.Lock()
	s.inTx = true
	f := s.fenced()
	s.mu.Unlock()
	e := &s.c.env
	if e.History != nil {
		moved, err := e.History.Move(ctx, tx, nil, []dialect.Fenced{f}, true, e.Clock.Now())
		if err != nil {
			return fmt.Errorf("ack row %d of %q in the handler's transaction: move it into the history: %w", s.id, e.Table.Unquoted, err)
		}
		if !moved[s.id] {
			return fmt.Errorf("ack row %d of %q in the handler's transaction: %w", s.id, e.Table.Unquoted, claim.ErrLost)
		}
		return nil
	}
	q := e.SQL.Ack.Call(s.id, f.Lease)
	res, err := tx.ExecContext(ctx, q.SQL, q.Args...)
	if err != nil {
		return fmt.Errorf("ack row %d of %q in the handler's transaction: %w", s.id, e.Table.Unquoted, err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		return fmt.Errorf("ack row %d of %q in the handler's transaction: %w", s.id, e.Table.Unquoted, claim.ErrLost)
	}
	return nil
}

// TxAborted says the transaction of AckTx did not commit: the row is
// settled as any other.
func (s *settler) TxAborted() {
	s.mu.Lock()
	s.inTx = false
	s.mu.Unlock()
}

// ackedInTx reports whether the row was acked by the handler's
// transaction, and if so counts it settled.
func (s *settler) ackedInTx() bool {
	s.mu.Lock()
	in := s.inTx
	s.mu.Unlock()
	if in {
		s.c.acks.settled()
	}
	return in
}
