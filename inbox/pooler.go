package inbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	iclaim "github.com/sqlinbox/sqlinbox/internal/claim"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/notify"
)

// ErrTransactionPooling is wrapped by every refusal of what a pooler in
// transaction mode (PgBouncer's pool_mode=transaction, RDS Proxy,
// Supavisor) cannot serve: the advisory form, a listening connection, and a
// pool whose connections keep pgx's statement cache. The error names the
// fix.
var ErrTransactionPooling = dialect.ErrTransactionPooling

// ListenURL sets the URL of the connection that listens for notifications,
// and turns them on (ListenNotify): behind a pooler in transaction mode
// LISTEN cannot work on the broker's pool, since each transaction gets any
// server session, so give a direct URL or one through a pooler in session
// mode here, and the broker's own URL may stay the pooled one. The broker
// opens a pool of its own on it (one connection in use) and closes it at
// Close. Default: the listener takes a connection of the broker's pool;
// behind a pooler in transaction mode there is none, and pickups fall back
// to the poll interval (see Broker.Pickup). Bound: a postgres:// URL that
// is not itself pooled per transaction.
func ListenURL(url string) Option {
	return func(c *brokerConfig) error {
		if !strings.HasPrefix(url, "postgres://") && !strings.HasPrefix(url, "postgresql://") {
			return fmt.Errorf("inbox: %w: ListenURL(%q); give a postgres:// URL, direct or through a pooler in session mode", ErrInvalid, dialect.Redact(url))
		}
		c.listen, c.notify = url, true
		return nil
	}
}

// Pickup says how a broker's subscriptions learn of rows that other
// processes write.
type Pickup struct {
	// Notified: a LISTEN connection wakes them at once (ListenNotify).
	Notified bool
	// Poll is the poll interval: how late a row is picked up when no
	// notification comes.
	Poll time.Duration
	// Fallback says why notifications were asked for but pickups wait for
	// the poll; "" when they were not asked for or they work.
	Fallback string
}

// Pickup says how the broker's subscriptions learn of rows that other
// processes write; it is set at Open or New.
func (b *Broker) Pickup() Pickup { return b.pickup }

// Pooling names what stands between the broker's pool and Postgres, as
// found at Open or New (or later, if the database did not answer then):
// "direct", "session pooling", "transaction pooling", or "unknown" (not
// found yet, or not Postgres).
func (b *Broker) Pooling() string {
	if b.d.Kind != dialect.Postgres {
		return dialect.PoolingUnknown.String()
	}
	ctx, cancel := context.WithTimeout(context.Background(), dialect.DetectTimeout)
	defer cancel()
	p, _ := dialect.PoolingOf(ctx, b.db)
	return p.String()
}

// detectPooling learns at start what stands between the pool and Postgres
// (dialect.PoolingOf: one round trip on a direct connection), and refuses a
// pool whose statement cache a pooler in transaction mode would break. A
// database that does not answer yet is asked again where it matters (the
// advisory form's Run).
func (b *Broker) detectPooling() (dialect.Pooling, error) {
	if b.d.Kind == dialect.MySQL {
		return dialect.PoolingUnknown, b.probeServer()
	}
	if b.d.Kind != dialect.Postgres {
		return dialect.PoolingUnknown, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), dialect.DetectTimeout)
	defer cancel()
	p, err := dialect.CheckPool(ctx, b.db, "inbox: the broker's pool")
	if errors.Is(err, dialect.ErrTransactionPooling) {
		return p, err
	}
	if err != nil {
		b.log.Debug("inbox: could not tell yet whether a pooler stands between the pool and Postgres", "err", err)
	}
	return p, nil
}

// probeServer reads at start which server a MySQL-kind pool reaches
// (dialect.Probe: MariaDB or MySQL, and its version) and refuses one too
// old. A database that does not answer yet is asked again at the first
// table check or publish.
func (b *Broker) probeServer() error {
	ctx, cancel := context.WithTimeout(context.Background(), dialect.DetectTimeout)
	defer cancel()
	err := b.d.Probe(ctx, b.db)
	if errors.Is(err, dialect.ErrServerVersion) {
		return fmt.Errorf("inbox: %w", err)
	}
	if err != nil {
		b.log.Debug("inbox: could not read the server's version yet", "err", err)
	}
	return nil
}

// startListener starts the listener of ListenNotify: on ListenURL's pool
// when given, otherwise on a connection of the broker's pool, unless that
// pool is behind a pooler in transaction mode, where LISTEN would hear
// nothing: then it says once that pickups fall back to the poll.
func (b *Broker) startListener(cfg brokerConfig, pooling dialect.Pooling) error {
	if !b.d.Notifies() {
		return fmt.Errorf("inbox: %w: ListenNotify needs Postgres; %s has no LISTEN/NOTIFY (in-process publishes still wake at once)", ErrInvalid, b.d)
	}
	db := b.db
	switch {
	case cfg.listen != "":
		ldb, _, err := dialect.Open(cfg.listen)
		if err != nil {
			return fmt.Errorf("inbox: ListenURL: %w", err)
		}
		ldb.SetMaxOpenConns(2)
		ctx, cancel := context.WithTimeout(context.Background(), dialect.DetectTimeout)
		p, _ := dialect.PoolingOf(ctx, ldb)
		cancel()
		if p == dialect.TransactionPooled {
			ldb.Close()
			return fmt.Errorf("inbox: %w: ListenURL(%s): %w, where LISTEN hears nothing: give %s", ErrInvalid, dialect.Redact(cfg.listen), ErrTransactionPooling, dialect.PoolerFix)
		}
		b.listenDB, db = ldb, ldb
	case pooling == dialect.TransactionPooled:
		b.pickup.Fallback = "the broker's pool goes through a pooler in transaction mode, where LISTEN hears nothing, and no ListenURL was given"
		b.log.Warn("inbox: notifications are off: pickups of rows other processes write fall back to the poll interval; give inbox.ListenURL a direct or session-pooled URL to have them",
			"reason", b.pickup.Fallback, "poll", b.poll)
		return nil
	case b.maxConn != 0 && b.maxConn < 3:
		return fmt.Errorf("inbox: %w: ListenNotify keeps one connection for the listener; a pool of %d leaves too few: give the pool at least 3, or a ListenURL", ErrInvalid, b.maxConn)
	}
	b.pickup.Notified = true
	b.listener = notify.NewListener(db, b.hub, b.log)
	ctx, cancel := context.WithCancel(context.Background())
	b.stopListener = cancel
	b.listenerDone = make(chan struct{})
	go func() {
		defer close(b.listenerDone)
		_ = b.listener.Run(ctx)
	}()
	return nil
}

// refuseSessionForm refuses a form whose holds live in a server session
// (the advisory form) on a pool behind a pooler in transaction mode. A
// database that does not answer passes: Run asks again before it claims.
func (b *Broker) refuseSessionForm(ctx context.Context, f iclaim.Form, name, table string) error {
	if _, ok := f.(interface{ HoldsSession() }); !ok || b.d.Kind != dialect.Postgres {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, dialect.DetectTimeout)
	defer cancel()
	if p, err := dialect.PoolingOf(ctx, b.db); err != nil || p != dialect.TransactionPooled {
		return nil
	}
	return fmt.Errorf("inbox: subscription %q on table %q: %w: the %s form holds each row with a session advisory lock, and %w: the lock stays on a server session other transactions then use, so two claimers could take one row. "+
		"Give this broker %s, or use lease.Form or rowlock.Form, which run there",
		name, table, ErrInvalid, f.Name(), ErrTransactionPooling, dialect.PoolerFix)
}
