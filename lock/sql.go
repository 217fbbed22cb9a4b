package lock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/notify"
)

// SQL keeps locks in the table sqlinbox_locks of a Postgres, SQLite,
// MariaDB or MySQL database (create it with migrations.ApplyLocks). Taking a free place is one
// statement. A release deletes its row, and the store sweeps the rows of
// expired holds every SweepEvery (a minute by default), so the table keeps the live
// holds and those that ended since the last sweep.
//
// On Postgres expiries run on the database's clock, and a release notifies
// (NOTIFY sqlinbox_locks) the waiters of every instance; the store listens on
// one connection of the pool, or on a listener it is given. On SQLite
// expiries run on the store's clock (the host's), waiters of the process are
// woken through notify.Default, and those of other processes of the same
// user on the same file by a datagram: each store binds a Unix socket in a
// directory of the system's temporary directory named after the file, and a
// release sends the lock's wake key to every socket there. Where that fails
// (no Unix sockets, another user) waiters find a freed place at their next
// retry (RetryDelay).
type SQL struct {
	db    *sql.DB
	d     *dialect.Dialect
	clock clock.Clock
	hub   *notify.Hub

	log   *slog.Logger
	sweep time.Duration
	files *fileWakes // SQLite on a file: wakes of other processes

	stop func()
	done sync.WaitGroup

	stmts dialect.LockSQL
}

// NewSQL returns a store over the user's pool, checking that the lock table
// is there. It sweeps expired holds until Close. On Postgres without
// SQLListener it also runs a listener that holds one pool connection until
// Close. An option's value out of its bound fails with an error wrapping
// ErrInvalid, before the database is asked.
func NewSQL(ctx context.Context, db *sql.DB, opts ...SQLOption) (*SQL, error) {
	o := sqlConfig{logger: slog.Default(), sweep: DefaultSweepEvery}
	if err := apply(&o, opts); err != nil {
		return nil, fmt.Errorf("lock.NewSQL: %w", err)
	}
	d, err := dialect.Detect(db)
	if err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	if err := db.PingContext(ctx); err != nil {
		return nil, fmt.Errorf("lock: the %s database is unreachable (check its URL, and that the server runs and accepts this client): %w", d, err)
	}
	stmts := d.Lock()
	pooling := dialect.PoolingUnknown
	if d.Kind == dialect.Postgres {
		if pooling, err = dialect.CheckPool(ctx, db, "lock: the store's pool"); errors.Is(err, dialect.ErrTransactionPooling) {
			return nil, err
		}
	}
	if err := probeTable(ctx, db, d, stmts.Probe.Call().SQL); err != nil {
		return nil, err
	}
	s := &SQL{
		db: db, d: d, clock: clock.OrHost(o.clock), log: o.logger, sweep: o.sweep,
		stmts: stmts,
	}
	runCtx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	switch {
	case d.Kind == dialect.SQLite:
		s.hub = notify.Default
		s.files = startFileWakes(ctx, db, s.hub, s.log)
	case d.Kind == dialect.MySQL:
		s.hub = notify.Default
		s.files = startServerWakes(ctx, db, s.hub, s.log)
	case o.listener != nil:
		s.hub = o.hub
		o.listener.Listen(dialect.LockChannel)
	case pooling == dialect.TransactionPooled:
		// LISTEN on a pooled connection hears nothing: waiters of other
		// instances find a freed place at their retry instead.
		s.hub = notify.NewHub()
		s.log.Warn("lock: the pool goes through a pooler in transaction mode, where LISTEN hears nothing: waiters in other instances find a released place at their RetryDelay, not at once; "+
			"give lock.SQLListener the Listener and Hub of an inbox broker opened with inbox.ListenURL (a direct or session-pooled URL) to wake them", "table", dialect.LockTable)
	default:
		s.hub = notify.NewHub()
		l := notify.NewListener(db, s.hub, o.logger)
		l.Listen(dialect.LockChannel)
		s.done.Go(func() { _ = l.Run(runCtx) })
	}
	if s.sweep > 0 {
		s.done.Go(func() { s.sweeper(runCtx) })
	}
	return s, nil
}

// probeTable reads the lock table, and says what the answer means: a
// missing table is created with migrations.ApplyLocks; any other failure is
// reported as it is.
func probeTable(ctx context.Context, db *sql.DB, d *dialect.Dialect, probeSQL string) error {
	var probe int
	err := db.QueryRowContext(ctx, probeSQL).Scan(&probe)
	switch {
	case err == nil:
		return nil
	case dialect.IsStatementCacheClash(err):
		return fmt.Errorf("lock: read %s table %s: %w: %w; open the pool with inbox.OpenDB, or add default_query_exec_mode=cache_describe to its URL", d, dialect.LockTable, dialect.ErrTransactionPooling, err)
	case dialect.IsMissingTable(d, err):
		return fmt.Errorf("lock: %s table %s does not exist (create it with migrations.ApplyLocks(ctx, db)): %w", d, dialect.LockTable, err)
	}
	return fmt.Errorf("lock: read %s table %s (migrations.ApplyLocks creates it): %w", d, dialect.LockTable, err)
}

// Close stops the store's sweep and its own listener, if it runs one, and on
// a SQLite file removes the store's wake socket (a process gone without
// Close leaves its socket until the next store of the file starts or
// releases). The pool stays open: it is the user's.
func (s *SQL) Close() error {
	if s.stop != nil {
		s.stop()
		s.done.Wait()
		s.stop = nil
		if s.files != nil {
			s.files.close()
		}
	}
	return nil
}

// sweeper deletes the rows of expired holds every s.sweep of the host's
// time until ctx ends. (Host time, not the store's clock: a fake clock's
// tests count their timers, and a sweep early or late only moves when rows
// go, not what a hold is.)
func (s *SQL) sweeper(ctx context.Context) {
	t := time.NewTicker(s.sweep)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("lock: sweep of expired holds failed; the next sweep tries again", "table", dialect.LockTable, "err", err)
		}
	}
}

// Sweep deletes the rows of holds that have ended, in batches, and answers
// how many it deleted. The store runs it every SweepEvery; call
// it yourself to reclaim at once.
func (s *SQL) Sweep(ctx context.Context) (int64, error) {
	var total int64
	for {
		q := s.stmts.Sweep.Call(s.clock.Now())
		res, err := s.db.ExecContext(ctx, q.SQL, q.Args...)
		if err != nil {
			return total, fmt.Errorf("lock: sweep %s: %w", dialect.LockTable, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, fmt.Errorf("lock: sweep %s: %w", dialect.LockTable, err)
		}
		total += n
		if n < dialect.LockSweepBatch {
			return total, nil
		}
	}
}

// Acquire implements Store.
func (s *SQL) Acquire(ctx context.Context, k Key, secret string, ttl time.Duration, maxHolders int) (Grant, error) {
	switch s.d.Kind {
	case dialect.Postgres:
		return s.acquirePostgres(ctx, k, secret, ttl, maxHolders)
	case dialect.MySQL:
		return s.acquireMySQL(ctx, k, secret, ttl, maxHolders)
	}
	now := s.clock.Now()
	ttl = time.Duration(max(ttl.Milliseconds(), 1)) * time.Millisecond
	var slot, fence int64
	q := s.stmts.Acquire.Call(k.Namespace, k.Name, secret, now, ttl, maxHolders, 0)
	err := s.db.QueryRowContext(ctx, q.SQL, q.Args...).Scan(&slot, &fence)
	if err == nil {
		return Grant{Acquired: true, Slot: int(slot), Fence: fence, TTL: ttl}, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return Grant{}, err
	}
	var left sql.NullInt64
	q = s.stmts.Nearest.Call(k.Namespace, k.Name, now, maxHolders)
	if err := s.db.QueryRowContext(ctx, q.SQL, q.Args...).Scan(&left); err != nil {
		return Grant{}, err
	}
	if !left.Valid {
		return Grant{Expiry: 0}, nil // freed since the insert: try again at once
	}
	return Grant{Expiry: time.Duration(left.Int64) * time.Millisecond}, nil
}

// acquirePostgres runs the acquire statement until it takes a place or sees
// none free. Concurrent statements read the free places from snapshots taken
// at their start, so several may pick the same one; the losers' upsert takes
// nothing although other places are free. A loser tries again at once: its
// new statement's snapshot sees the winners' rows, and it looks from a random
// slot so that losers of one race spread over the places still free. Each
// lost race is a place another taker won, so the retries are few; past
// pgRaceRetries the call answers a race just lost (Expiry 0) and the Locker's
// own retry carries on within its wait.
func (s *SQL) acquirePostgres(ctx context.Context, k Key, secret string, ttl time.Duration, maxHolders int) (Grant, error) {
	from := 0
	for race := 0; ; race++ {
		var slot, fence, expiry sql.NullInt64
		var sawFree bool
		q := s.stmts.Acquire.Call(k.Namespace, k.Name, secret, time.Time{}, ttl, maxHolders, from)
		err := s.db.QueryRowContext(ctx, q.SQL, q.Args...).Scan(&slot, &fence, &sawFree, &expiry)
		if err != nil {
			return Grant{}, err
		}
		if slot.Valid {
			return Grant{Acquired: true, Slot: int(slot.Int64), Fence: fence.Int64, TTL: ttl}, nil
		}
		switch {
		case sawFree && race < pgRaceRetries:
			from = rand.IntN(maxHolders)
		case sawFree:
			return Grant{Expiry: 0}, nil
		case expiry.Valid:
			return Grant{Expiry: time.Duration(expiry.Int64) * time.Microsecond}, nil
		default:
			return Grant{Expiry: -1}, nil
		}
	}
}

// pgRaceRetries bounds the statements one Postgres Acquire runs after races
// lost to concurrent takers.
const pgRaceRetries = 64

// Extend implements Store.
func (s *SQL) Extend(ctx context.Context, k Key, slot int, secret string, ttl time.Duration) (Grant, error) {
	if s.d.Kind == dialect.MySQL {
		return s.extendMySQL(ctx, k, slot, secret, ttl)
	}
	var now time.Time
	if s.d.Kind == dialect.SQLite {
		ttl = time.Duration(max(ttl.Milliseconds(), 1)) * time.Millisecond
		now = s.clock.Now()
	}
	var fence int64
	q := s.stmts.Extend.Call(k.Namespace, k.Name, slot, secret, now, ttl)
	err := s.db.QueryRowContext(ctx, q.SQL, q.Args...).Scan(&fence)
	if errors.Is(err, sql.ErrNoRows) {
		return Grant{}, nil
	}
	if err != nil {
		return Grant{}, err
	}
	return Grant{Acquired: true, Slot: slot, Fence: fence, TTL: ttl}, nil
}

// Release implements Store.
func (s *SQL) Release(ctx context.Context, k Key, slot int, secret string) (bool, error) {
	var now time.Time
	if s.d.Kind != dialect.Postgres {
		now = s.clock.Now()
	}
	var freed bool
	var err error
	if s.d.Kind == dialect.MySQL {
		freed, err = s.releaseMySQL(ctx, s.stmts.Release.Call(k.Namespace, k.Name, slot, secret, k.WakeKey(), now))
	} else {
		freed, err = s.exec(ctx, s.stmts.Release.Call(k.Namespace, k.Name, slot, secret, k.WakeKey(), now))
	}
	if err == nil && !freed && s.stmts.ReleaseKeep.SQL() != "" {
		// The row of the table's greatest fence stays, freed.
		freed, err = s.exec(ctx, s.stmts.ReleaseKeep.Call(k.Namespace, k.Name, slot, secret, k.WakeKey(), now))
	}
	if err != nil {
		return false, err
	}
	if freed {
		// Waiters of this process need not wait for the notification's
		// round trip; those elsewhere get it at commit (Postgres) or by
		// datagram (SQLite on a file, MariaDB/MySQL on this host).
		s.hub.Wake(dialect.LockChannel, k.WakeKey())
		if s.files != nil {
			s.files.send(k.WakeKey())
		}
	}
	return freed, nil
}

// exec runs a statement that returns a row when it changed one.
func (s *SQL) exec(ctx context.Context, q dialect.Call) (bool, error) {
	rows, err := s.db.QueryContext(ctx, q.SQL, q.Args...)
	if err != nil {
		return false, err
	}
	changed := rows.Next()
	rows.Close()
	return changed, rows.Err()
}

// Subscribe implements Store.
func (s *SQL) Subscribe(ctx context.Context, k Key) (Wakes, error) {
	return s.hub.Subscribe(dialect.LockChannel, k.WakeKey()), nil
}
