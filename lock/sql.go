package lock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/notify"
)

// SQL keeps locks in the table sqlinbox_locks of a Postgres or SQLite
// database (create it with migrations.ApplyLocks). Taking a free place is one
// statement.
//
// On Postgres expiries run on the database's clock, and a release notifies
// (NOTIFY sqlinbox_locks) the waiters of every instance; the store listens on
// one connection of the pool, or on a listener it is given. On SQLite
// expiries run on the store's clock (the host's), waiters of the process are
// woken through notify.Default, and those of other processes find a freed
// place at their next retry (Options.RetryDelay).
type SQL struct {
	db    *sql.DB
	d     *dialect.Dialect
	clock clock.Clock
	hub   *notify.Hub

	stop func()
	done chan struct{}

	acquire, nearest, extend, release string
}

// SQLOptions configure NewSQL. The zero value is ready to use.
type SQLOptions struct {
	// Clock is the clock SQLite holds expire on. Default: clock.Host.
	// Postgres always uses the database's now().
	Clock clock.Clock
	// Listener and Hub (Postgres) are a running notify.Listener and the hub
	// it wakes, such as a broker's: the store listens on them instead of
	// keeping a pool connection of its own. Default: nil, the store runs its
	// own listener until Close. Give both or neither.
	Listener *notify.Listener
	Hub      *notify.Hub
	// Logger logs the store's own listener's reconnections.
	// Default: slog.Default().
	Logger *slog.Logger
}

// NewSQL returns a store over the user's pool, checking that the lock table
// is there. On Postgres without SQLOptions.Listener it starts a listener
// that holds one pool connection until Close.
func NewSQL(ctx context.Context, db *sql.DB, o SQLOptions) (*SQL, error) {
	d, err := dialect.Detect(db)
	if err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	if (o.Listener == nil) != (o.Hub == nil) {
		return nil, fmt.Errorf("%w: lock.NewSQL: give SQLOptions.Listener and SQLOptions.Hub together, or neither", ErrInvalid)
	}
	var probe int
	err = db.QueryRowContext(ctx, "SELECT COUNT(*) FROM (SELECT 1 FROM "+dialect.LockTable+" LIMIT 1) AS t").Scan(&probe)
	if err != nil {
		return nil, fmt.Errorf("lock: %s table %s is not usable (create it with migrations.ApplyLocks(ctx, db)): %w", d, dialect.LockTable, err)
	}
	s := &SQL{
		db: db, d: d, clock: clock.OrHost(o.Clock),
		acquire: d.LockAcquire(), nearest: d.LockNearest(), extend: d.LockExtend(), release: d.LockRelease(),
	}
	switch {
	case d.Kind == dialect.SQLite:
		s.hub = notify.Default
	case o.Listener != nil:
		s.hub = o.Hub
		o.Listener.Listen(dialect.LockChannel)
	default:
		s.hub = notify.NewHub()
		l := notify.NewListener(db, s.hub, o.Logger)
		l.Listen(dialect.LockChannel)
		runCtx, cancel := context.WithCancel(context.Background())
		s.stop, s.done = cancel, make(chan struct{})
		go func() {
			defer close(s.done)
			_ = l.Run(runCtx)
		}()
	}
	return s, nil
}

// Close stops the store's own listener, if it runs one. The pool stays
// open: it is the user's.
func (s *SQL) Close() error {
	if s.stop != nil {
		s.stop()
		<-s.done
		s.stop = nil
	}
	return nil
}

// Acquire implements Store.
func (s *SQL) Acquire(ctx context.Context, k Key, secret string, ttl time.Duration, maxHolders int) (Grant, error) {
	if s.d.Kind == dialect.Postgres {
		return s.acquirePostgres(ctx, k, secret, ttl, maxHolders)
	}
	now := s.clock.Now().UnixMilli()
	ms := max(ttl.Milliseconds(), 1)
	var slot, fence int64
	err := s.db.QueryRowContext(ctx, s.acquire, k.Namespace, k.Name, secret, now, ms, maxHolders).Scan(&slot, &fence)
	if err == nil {
		return Grant{Acquired: true, Slot: int(slot), Fence: fence, TTL: time.Duration(ms) * time.Millisecond}, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return Grant{}, err
	}
	var left sql.NullInt64
	if err := s.db.QueryRowContext(ctx, s.nearest, k.Namespace, k.Name, now, maxHolders).Scan(&left); err != nil {
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
		err := s.db.QueryRowContext(ctx, s.acquire, k.Namespace, k.Name, secret, ttl.Microseconds(), maxHolders, from).
			Scan(&slot, &fence, &sawFree, &expiry)
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
	args := []any{k.Namespace, k.Name, slot, secret, ttl.Microseconds()}
	if s.d.Kind == dialect.SQLite {
		ttl = time.Duration(max(ttl.Milliseconds(), 1)) * time.Millisecond
		args = []any{k.Namespace, k.Name, slot, secret, ttl.Milliseconds(), s.clock.Now().UnixMilli()}
	}
	var fence int64
	err := s.db.QueryRowContext(ctx, s.extend, args...).Scan(&fence)
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
	last := any(k.WakeKey())
	if s.d.Kind == dialect.SQLite {
		last = s.clock.Now().UnixMilli()
	}
	rows, err := s.db.QueryContext(ctx, s.release, k.Namespace, k.Name, slot, secret, last)
	if err != nil {
		return false, err
	}
	freed := rows.Next()
	rows.Close()
	if err := rows.Err(); err != nil {
		return false, err
	}
	if freed {
		// Waiters of this process need not wait for the notification's
		// round trip; those elsewhere get it at commit.
		s.hub.Wake(dialect.LockChannel, k.WakeKey())
	}
	return freed, nil
}

// Subscribe implements Store.
func (s *SQL) Subscribe(ctx context.Context, k Key) (Wakes, error) {
	return s.hub.Subscribe(dialect.LockChannel, k.WakeKey()), nil
}
