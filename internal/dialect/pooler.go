package dialect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"time"
	"weak"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// Pooling says what stands between a pool's connections and the Postgres
// server: a driver fact the library acts on. A pooler in transaction mode
// (PgBouncer's pool_mode=transaction, RDS Proxy, Supavisor) hands each
// transaction whichever server session is free, so what lives in a session
// does not survive from one transaction to the next: pgx's named prepared
// statements, session advisory locks, LISTEN.
type Pooling int

const (
	// PoolingUnknown: not asked yet, the database did not answer, or the
	// pool's driver hides its pgx connections.
	PoolingUnknown Pooling = iota
	// Direct: each connection is its own server session.
	Direct
	// SessionPooled: a pooler stands between, and keeps one server session
	// for each client connection while it lives.
	SessionPooled
	// TransactionPooled: a pooler hands each transaction any free server
	// session.
	TransactionPooled
)

func (p Pooling) String() string {
	switch p {
	case Direct:
		return "direct"
	case SessionPooled:
		return "session pooling"
	case TransactionPooled:
		return "transaction pooling"
	}
	return "unknown"
}

// PoolerFix is what an error about a pooler in transaction mode tells the
// user to write instead.
const PoolerFix = "a direct URL (postgres://user@db-host:5432/db) or one through a pooler in session mode (PgBouncer: pool_mode=session)"

// ErrTransactionPooling is wrapped by every refusal of what a pooler in
// transaction mode cannot serve.
var ErrTransactionPooling = errors.New("the connection goes through a pooler in transaction mode (PgBouncer pool_mode=transaction or the like), which gives each transaction any server session")

// facts is what the library learned of one pool. mode is the query exec
// mode of the pool's connections, read from one of them.
type facts struct {
	mu      sync.Mutex
	pooling Pooling
	mode    pgx.QueryExecMode
}

var (
	factsMu sync.Mutex
	byPool  = map[weak.Pointer[sql.DB]]*facts{}
)

// factsOf returns the facts cell of db, made on first use; it goes when db
// is collected.
func factsOf(db *sql.DB) *facts {
	key := weak.Make(db)
	factsMu.Lock()
	f, ok := byPool[key]
	factsMu.Unlock()
	if !ok {
		f = register(db, &facts{})
	}
	return f
}

// register keeps f as db's facts, unless db has some already.
func register(db *sql.DB, f *facts) *facts {
	key := weak.Make(db)
	factsMu.Lock()
	defer factsMu.Unlock()
	if had, ok := byPool[key]; ok {
		return had
	}
	byPool[key] = f
	runtime.AddCleanup(db, func(k weak.Pointer[sql.DB]) {
		factsMu.Lock()
		delete(byPool, k)
		factsMu.Unlock()
	}, key)
	return f
}

// openPostgres opens a pool on cfg whose first connection learns the
// pool's Pooling on a probe connection of its own (one connection and one
// round trip when direct; a second connection and a few round trips behind
// a pooler). Behind a pooler the connections run queries in pgx's
// cache_describe mode (in session mode too: should a pooler in transaction
// mode ever pass for one in session mode, nothing breaks), since pgx's default
// (cache_statement) prepares named statements that another client's
// transaction then meets on the same server session ("prepared statement
// stmtcache_... already exists"); cache_describe sends each statement with
// the unnamed statement, still in one round trip. A URL that sets
// default_query_exec_mode keeps it.
func openPostgres(rawURL string, cfg *pgx.ConnConfig) *sql.DB {
	explicit := false
	if u, err := url.Parse(rawURL); err == nil {
		explicit = u.Query().Has("default_query_exec_mode")
	}
	f := &facts{}
	before := func(ctx context.Context, c *pgx.ConnConfig) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.pooling == PoolingUnknown {
			p, err := detectConfig(ctx, c)
			if err != nil {
				return err
			}
			f.pooling = p
		}
		if f.pooling != Direct && !explicit {
			c.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
		}
		f.mode = c.DefaultQueryExecMode
		return nil
	}
	db := stdlib.OpenDB(*cfg, stdlib.OptionShouldPing(shouldPing), stdlib.OptionBeforeConnect(before))
	register(db, f)
	return db
}

// PoolingOf tells what stands between db's connections and Postgres,
// asking once per pool: an answer is kept, an error is not. On a pool
// Open made, its first connection answers; on another pgx pool, two of
// its connections: a connection whose server process (pg_backend_pid())
// differs from the one it was told at connect is behind a pooler; behind
// one in transaction mode, a statement on a second connection gets the
// server session the first connection's last statement used, or the first
// connection's statements run on two. One round
// trip when direct, up to 21 behind a pooler in session mode. A pool whose
// driver hides its pgx connections (a wrapping driver) is PoolingUnknown.
func PoolingOf(ctx context.Context, db *sql.DB) (Pooling, error) {
	f := factsOf(db)
	f.mu.Lock()
	p := f.pooling
	f.mu.Unlock()
	if p != PoolingUnknown {
		return p, nil
	}
	a, err := db.Conn(ctx)
	if err != nil {
		return PoolingUnknown, err
	}
	defer a.Close()
	// A pool Open made learned it as a's connection was made.
	f.mu.Lock()
	p = f.pooling
	f.mu.Unlock()
	if p != PoolingUnknown {
		return p, nil
	}
	err = a.Raw(func(ac any) error {
		sa, ok := ac.(*stdlib.Conn)
		if !ok {
			return nil
		}
		pa := sa.Conn()
		p, err = classify(ctx, pa, func(use func(*pgx.Conn) error) error {
			b, err := db.Conn(ctx)
			if err != nil {
				return err
			}
			defer b.Close()
			return b.Raw(func(bc any) error {
				sb, ok := bc.(*stdlib.Conn)
				if !ok {
					return fmt.Errorf("a second connection of the pool is %T, not pgx's", bc)
				}
				return use(sb.Conn())
			})
		})
		if err != nil {
			return err
		}
		f.mu.Lock()
		f.pooling, f.mode = p, pa.Config().DefaultQueryExecMode
		f.mu.Unlock()
		return nil
	})
	if err != nil {
		return PoolingUnknown, fmt.Errorf("tell whether a pooler stands between the pool and Postgres: %w", err)
	}
	return p, nil
}

// CheckPool refuses a pool behind a pooler in transaction mode whose
// connections keep pgx's statement cache (default_query_exec_mode
// cache_statement, or describe_exec, whose two round trips may meet two
// server sessions): every statement would fail now and then with
// "prepared statement stmtcache_... already exists". what names the pool in
// the error. A pool whose Pooling is unknown passes.
func CheckPool(ctx context.Context, db *sql.DB, what string) (Pooling, error) {
	p, err := PoolingOf(ctx, db)
	if err != nil || p != TransactionPooled {
		return p, err
	}
	f := factsOf(db)
	f.mu.Lock()
	mode := f.mode
	f.mu.Unlock()
	switch mode {
	case pgx.QueryExecModeCacheStatement, pgx.QueryExecModeDescribeExec:
		return p, fmt.Errorf("%s: %w; its connections run statements in pgx's %s mode, whose named prepared statements break there (\"prepared statement stmtcache_... already exists\"): "+
			"add default_query_exec_mode=cache_describe to its URL (or set ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe), or open it with inbox.OpenDB, which does so behind such a pooler",
			what, ErrTransactionPooling, mode)
	}
	return p, nil
}

// detectConfig learns the Pooling of cfg's server on connections of its own.
func detectConfig(ctx context.Context, cfg *pgx.ConnConfig) (Pooling, error) {
	a, err := pgx.ConnectConfig(ctx, cfg.Copy())
	if err != nil {
		return PoolingUnknown, err
	}
	defer a.Close(context.WithoutCancel(ctx))
	return classify(ctx, a, func(use func(*pgx.Conn) error) error {
		b, err := pgx.ConnectConfig(ctx, cfg.Copy())
		if err != nil {
			return err
		}
		defer b.Close(context.WithoutCancel(ctx))
		return use(b)
	})
}

// detectTries bounds the rounds classify runs. One round seldom tells
// under load: another client may take the server session the first
// connection just gave back, and the pooler may hand the first connection
// that one again; a pooler in session mode never does either, whatever the
// rounds.
const detectTries = 10

// classify tells the Pooling behind connection a, with second(use) lending
// a second connection of the same pool when a turns out to be pooled: a
// pooler in transaction mode shows itself when a statement of the second
// connection runs on the server process a's last statement used, or a's
// statements run on two. No statement waits for another (a transaction
// held open on the second connection would, and a pool of few server
// connections with many instances starting at once would deadlock on it);
// every one goes by the simple protocol, so the probe leaves no prepared
// statement behind.
func classify(ctx context.Context, a *pgx.Conn, second func(use func(*pgx.Conn) error) error) (Pooling, error) {
	p1, err := backendPID(ctx, a)
	if err != nil {
		return PoolingUnknown, err
	}
	if p1 == a.PgConn().PID() {
		return Direct, nil // the pid it was given at connect is the server's
	}
	pooling := SessionPooled
	err = second(func(b *pgx.Conn) error {
		for range detectTries {
			q, err := backendPID(ctx, b)
			if err != nil {
				return err
			}
			pa, err := backendPID(ctx, a)
			if err != nil {
				return err
			}
			if q == p1 || pa != p1 {
				pooling = TransactionPooled
				return nil
			}
		}
		return nil
	})
	if err != nil {
		return PoolingUnknown, err
	}
	return pooling, nil
}

func backendPID(ctx context.Context, c *pgx.Conn) (uint32, error) {
	var pid uint32
	err := c.QueryRow(ctx, "SELECT pg_backend_pid()", pgx.QueryExecModeSimpleProtocol).Scan(&pid)
	return pid, err
}

// IsStatementCacheClash reports whether err is pgx's statement cache
// meeting a prepared statement of another client on a server session a
// pooler in transaction mode handed over (SQLSTATE 42P05, or 26000 when
// the statement it prepared went with the session).
func IsStatementCacheClash(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && (pg.Code == "42P05" || pg.Code == "26000")
}

// DetectTimeout bounds the detection a broker, a lock store or a scheduler
// runs at start; a database that does not answer by then is asked again
// when first used.
const DetectTimeout = 5 * time.Second

// Redact hides a URL's password, for messages.
func Redact(raw string) string { return redact(raw) }

// IsMissingTable reports whether err says a table does not exist: SQLSTATE
// 42P01 on Postgres, "no such table" on SQLite, error 1146 on MySQL.
func IsMissingTable(d *Dialect, err error) bool {
	var pg *pgconn.PgError
	switch {
	case err == nil:
		return false
	case errors.As(err, &pg):
		return pg.Code == "42P01"
	case d.Kind == SQLite:
		return strings.Contains(err.Error(), "no such table")
	case d.Kind == MySQL:
		return strings.Contains(err.Error(), "Error 1146")
	}
	return false
}
