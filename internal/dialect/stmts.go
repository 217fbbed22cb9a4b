package dialect

import (
	"context"
	"database/sql"
	"sync"
)

// Stmts runs the statements a pool sends again and again (claims, acks),
// preparing each once. On SQLite it keeps a *sql.Stmt per statement text,
// which database/sql keeps prepared on every connection it runs on: the
// modernc driver otherwise parses the text on every call, a large part of a
// SQLite drain's CPU. pgx keeps a statement cache of its own, so on
// Postgres Stmts sends the text as it is.
//
// Statements are few (one set per table and form) and live until Close.
type Stmts struct {
	db      *sql.DB
	prepare bool

	mu     sync.Mutex
	byText map[string]*sql.Stmt
	closed bool
}

// NewStmts returns the statement cache of db, an engine of dialect d.
func NewStmts(db *sql.DB, d *Dialect) *Stmts {
	return &Stmts{db: db, prepare: d.Kind == SQLite, byText: map[string]*sql.Stmt{}}
}

// PlainStmts returns a Stmts that prepares nothing: it sends the text as it is.
func PlainStmts(db *sql.DB) *Stmts { return &Stmts{db: db} }

// stmt returns the prepared statement of query, or nil when the pool runs
// the text as it is (Postgres, or the cache is closed).
func (s *Stmts) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	if !s.prepare {
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, nil
	}
	if st, ok := s.byText[query]; ok {
		return st, nil
	}
	st, err := s.db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	s.byText[query] = st
	return st, nil
}

// QueryContext is db.QueryContext through the cache.
func (s *Stmts) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	st, err := s.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	if st == nil {
		return s.db.QueryContext(ctx, query, args...)
	}
	return st.QueryContext(ctx, args...)
}

// ExecContext is db.ExecContext through the cache.
func (s *Stmts) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	st, err := s.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	if st == nil {
		return s.db.ExecContext(ctx, query, args...)
	}
	return st.ExecContext(ctx, args...)
}

// Ready prepares queries ahead of a transaction that runs them (In): inside
// it, a pool whose last free connection the transaction holds could not
// prepare them.
func (s *Stmts) Ready(ctx context.Context, queries ...string) error {
	for _, q := range queries {
		if _, err := s.stmt(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// In runs statements in tx: those the cache holds (see Ready) through
// their prepared statements, which database/sql keeps on each connection
// they ran on, and any other as its text.
func (s *Stmts) In(tx *sql.Tx) TxStmts { return TxStmts{s: s, tx: tx} }

// TxStmts is Stmts in a transaction (Stmts.In).
type TxStmts struct {
	s  *Stmts
	tx *sql.Tx
}

// prepared is the cache's statement of query, nil when it holds none.
func (t TxStmts) prepared(query string) *sql.Stmt {
	if !t.s.prepare {
		return nil
	}
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	return t.s.byText[query]
}

// ExecContext is tx.ExecContext through the cache.
func (t TxStmts) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st := t.prepared(query); st != nil {
		return t.tx.StmtContext(ctx, st).ExecContext(ctx, args...)
	}
	return t.tx.ExecContext(ctx, query, args...)
}

// QueryContext is tx.QueryContext through the cache.
func (t TxStmts) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := t.prepared(query); st != nil {
		return t.tx.StmtContext(ctx, st).QueryContext(ctx, args...)
	}
	return t.tx.QueryContext(ctx, query, args...)
}

// Close closes every statement prepared; later calls send the text as it is.
func (s *Stmts) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	var first error
	for text, st := range s.byText {
		if err := st.Close(); err != nil && first == nil {
			first = err
		}
		delete(s.byText, text)
	}
	return first
}
