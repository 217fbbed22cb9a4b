package claim

import (
	"context"
	"database/sql"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// History is where a subscription that keeps a history (inbox.History)
// moves its acked rows. Nil in an Env: acks delete.
type History struct {
	SQL *dialect.HistorySQL
	// Instance is recorded in each row as the instance that handled it.
	Instance string
}

// Runner runs statements: a *sql.DB, *sql.Conn, *sql.Tx or *dialect.Stmts.
type Runner interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// Move moves rows into the history, each fenced on its lease where fenced
// (else held by a lock), stamped now, and returns the ids it moved. On
// Postgres the move is one statement run by run. Elsewhere it is a copy and
// a delete in one transaction, which commits only when both counted every
// row: begin opens it (a batch that falls short is rolled back and each row
// moved alone, since a count does not say which row it missed). With begin
// nil, run is a transaction already: a move that falls short there returns
// no ids, and the caller rolls the transaction back (its copy with it).
func (h *History) Move(ctx context.Context, run Runner, begin func(context.Context) (*sql.Tx, error), rows []dialect.Fenced, fenced bool, now time.Time) (map[int64]bool, error) {
	s := h.SQL.MoveLocked
	if fenced {
		s = h.SQL.Move
	}
	calls := s.Call(rows, now, h.Instance)
	moved := make(map[int64]bool, len(rows))
	if s.Returns() {
		return moved, ReadIDs(ctx, run, calls[0], moved)
	}
	if begin == nil {
		ok, err := runAll(ctx, run, calls, len(rows))
		if ok {
			markAll(moved, rows)
		}
		return moved, err
	}
	ok, err := moveTx(ctx, run, begin, calls, len(rows))
	if err != nil || ok {
		if ok {
			markAll(moved, rows)
		}
		return moved, err
	}
	if len(rows) == 1 {
		return moved, nil
	}
	for _, r := range rows {
		ok, err := moveTx(ctx, run, begin, s.Call([]dialect.Fenced{r}, now, h.Instance), 1)
		if err != nil {
			return moved, err
		}
		moved[r.ID] = ok
	}
	return moved, nil
}

// moveTx runs the copy and the delete in a transaction of their own and
// commits when each counted n rows. Where run is a statement cache, the
// two run as its prepared statements: on SQLite, parsing their text again
// at every batch took a tenth of a drain's CPU.
func moveTx(ctx context.Context, run Runner, begin func(context.Context) (*sql.Tx, error), calls []dialect.Call, n int) (bool, error) {
	stmts, _ := run.(*dialect.Stmts)
	if stmts != nil {
		for _, c := range calls {
			if err := stmts.Ready(ctx, c.SQL); err != nil {
				return false, err
			}
		}
	}
	tx, err := begin(ctx)
	if err != nil {
		return false, err
	}
	var in Runner = tx
	if stmts != nil {
		in = stmts.In(tx)
	}
	ok, err := runAll(ctx, in, calls, n)
	if err != nil || !ok {
		tx.Rollback()
		return false, err
	}
	return true, tx.Commit()
}

// runAll runs calls in order and says whether each changed n rows.
func runAll(ctx context.Context, run Runner, calls []dialect.Call, n int) (bool, error) {
	for _, c := range calls {
		res, err := run.ExecContext(ctx, c.SQL, c.Args...)
		if err != nil {
			return false, err
		}
		if got, err := res.RowsAffected(); err != nil || got != int64(n) {
			return false, err
		}
	}
	return true, nil
}

// ReadIDs runs c, a statement that returns ids (DELETE ... RETURNING id,
// a move into the history), and marks each in into.
func ReadIDs(ctx context.Context, run Runner, c dialect.Call, into map[int64]bool) error {
	rows, err := run.QueryContext(ctx, c.SQL, c.Args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return err
		}
		into[id] = true
	}
	return rows.Err()
}

func markAll(moved map[int64]bool, rows []dialect.Fenced) {
	for _, r := range rows {
		moved[r.ID] = true
	}
}
