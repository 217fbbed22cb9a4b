package claim

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/sqlinbox/sqlinbox/internal/inboxtype"
)

// ConnWatch tells when a connection a form holds between statements ends:
// while it is started, a goroutine waits in a read on the idle connection
// (no statement, no round trip), which returns the moment the server ends
// the session (its FATAL message, or the socket's close). Then Hold's
// context ends with ErrHoldLost. The read must be paused before each
// statement the form sends on the connection, and started again after.
// On a driver other than pgx that can ping (go-sql-driver/mysql), the
// connection is pinged every pingEvery instead, so a hold lost is told
// within that; on one that cannot, nothing is watched and Hold never ends.
type ConnWatch struct {
	conn *sql.Conn
	ctx  context.Context
	lose context.CancelCauseFunc

	mu    sync.Mutex
	stop  context.CancelFunc // the running read's; nil when none runs
	done  chan struct{}      // closed when the running read returned
	ended bool
}

// NewConnWatch returns a watch of conn, not started.
func NewConnWatch(conn *sql.Conn) *ConnWatch {
	ctx, lose := context.WithCancelCause(context.Background())
	return &ConnWatch{conn: conn, ctx: ctx, lose: lose}
}

// Hold is done, with cause ErrHoldLost, once the connection was seen to end.
func (w *ConnWatch) Hold() context.Context { return w.ctx }

// Lost says whether the connection was seen to end.
func (w *ConnWatch) Lost() bool { return w.ctx.Err() != nil }

// Start starts the read, unless one runs or the connection is lost.
func (w *ConnWatch) Start() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stop != nil || w.ended || w.Lost() {
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	w.stop, w.done = stop, done
	go func() {
		defer close(done)
		err := w.conn.Raw(func(dc any) error {
			sc, ok := dc.(*stdlib.Conn)
			if !ok {
				if p, ok := dc.(driver.Pinger); ok {
					return pingUntil(ctx, p)
				}
				<-ctx.Done() // no way to watch: wait to be paused
				return nil
			}
			for {
				// Returns nil only for a notification, which a held
				// connection does not listen for; read on.
				if err := sc.Conn().PgConn().WaitForNotification(ctx); err != nil {
					return err
				}
			}
		})
		if err != nil && ctx.Err() == nil {
			w.lose(inboxtype.ErrHoldLost)
		}
	}()
}

// Pause stops the read and waits for it to return, so the connection is
// free for a statement.
func (w *ConnWatch) Pause() {
	w.mu.Lock()
	stop, done := w.stop, w.done
	w.stop, w.done = nil, nil
	w.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

// End pauses the watch for good.
func (w *ConnWatch) End() {
	w.mu.Lock()
	w.ended = true
	w.mu.Unlock()
	w.Pause()
}

// pingEvery is how often a held connection whose driver has no read to
// wait in is pinged (a COM_PING on MySQL: no statement, no transaction
// touched).
const pingEvery = time.Second

// pingTimeout bounds one ping: a server that does not answer in it has
// lost the connection for the holder's purposes.
const pingTimeout = 10 * time.Second

// pingUntil pings p every pingEvery until ctx ends (nil) or a ping fails
// (its error). A ping runs under a context of its own, not ctx: the MySQL
// driver closes a connection whose statement's context is canceled, which
// a Pause would otherwise do to a held transaction.
func pingUntil(ctx context.Context, p driver.Pinger) error {
	t := time.NewTicker(pingEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
		err := p.Ping(pctx)
		cancel()
		if err != nil {
			return err
		}
	}
}
