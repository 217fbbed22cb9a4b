package lock

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// mysqlTries bounds the transactions one MariaDB/MySQL Acquire runs after a
// deadlock (1213), a lock wait timeout (1205) or an insert that lost a race
// for a place's row (1062): each is retried at once, never surfaced; past
// the bound the call answers a race just lost (Expiry 0) and the Locker's
// own retry carries on within its wait.
const mysqlTries = 16

// acquireMySQL takes a place in one transaction (see dialect.MySQLLockSQL).
func (s *SQL) acquireMySQL(ctx context.Context, k Key, secret string, ttl time.Duration, maxHolders int) (Grant, error) {
	ttl = max(ttl.Truncate(time.Microsecond), time.Microsecond)
	for try := 1; ; try++ {
		g, err := s.tryMySQL(ctx, k, secret, ttl, maxHolders)
		if err == nil {
			return g, nil
		}
		if !s.d.Conflict(err) && !dialect.Duplicate(err) {
			return Grant{}, err
		}
		if try == mysqlTries {
			return Grant{Expiry: 0}, nil
		}
	}
}

func (s *SQL) tryMySQL(ctx context.Context, k Key, secret string, ttl time.Duration, maxHolders int) (Grant, error) {
	q := s.stmts.MySQL
	tx, err := s.db.BeginTx(ctx, dialect.MySQLLockTx())
	if err != nil {
		return Grant{}, err
	}
	defer tx.Rollback()
	now := dialect.MySQLTime(s.clock.Now())
	c := q.Places.Call(k.Namespace, k.Name, maxHolders)
	rows, err := tx.QueryContext(ctx, c.SQL, c.Args...)
	if err != nil {
		return Grant{}, err
	}
	free, expired := -1, false
	var nearest time.Time
	next := 0 // the lowest slot not yet seen: free when no row has it
	for rows.Next() {
		var slot int
		var expires time.Time
		if err := rows.Scan(&slot, &expires); err != nil {
			rows.Close()
			return Grant{}, err
		}
		if free < 0 && slot > next {
			free = next
		}
		next = slot + 1
		switch {
		case !expires.After(now) && free < 0:
			free, expired = slot, true
		case expires.After(now) && (nearest.IsZero() || expires.Before(nearest)):
			nearest = expires
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return Grant{}, err
	}
	if free < 0 && next < maxHolders {
		free = next
	}
	if free < 0 {
		if nearest.IsZero() {
			return Grant{Expiry: -1}, nil
		}
		return Grant{Expiry: nearest.Sub(now)}, nil
	}
	take := q.Insert
	if expired {
		take = q.Take
	}
	if _, err := s.execTx(ctx, tx, take.Call(k.Namespace, k.Name, free, secret, now.Add(ttl))); err != nil {
		return Grant{}, err
	}
	res, err := s.execTx(ctx, tx, q.Draw.Call())
	if err != nil {
		return Grant{}, err
	}
	fence, err := res.LastInsertId()
	if err != nil {
		return Grant{}, err
	}
	if fence == 0 {
		return Grant{}, fmt.Errorf("lock: %s has no counter row (run migrations.ApplyLocks again)", dialect.LockFenceTable)
	}
	if _, err := s.execTx(ctx, tx, q.SetFence.Call(k.Namespace, k.Name, free, fence)); err != nil {
		return Grant{}, err
	}
	if err := tx.Commit(); err != nil {
		return Grant{}, err
	}
	return Grant{Acquired: true, Slot: free, Fence: fence, TTL: ttl}, nil
}

func (s *SQL) execTx(ctx context.Context, tx *sql.Tx, c dialect.Call) (sql.Result, error) {
	return tx.ExecContext(ctx, c.SQL, c.Args...)
}

// extendMySQL makes a live place last ttl from now: one UPDATE that
// answers the place's fence as its LastInsertId.
func (s *SQL) extendMySQL(ctx context.Context, k Key, slot int, secret string, ttl time.Duration) (Grant, error) {
	ttl = max(ttl.Truncate(time.Microsecond), time.Microsecond)
	for try := 1; ; try++ {
		c := s.stmts.Extend.Call(k.Namespace, k.Name, slot, secret, s.clock.Now(), ttl)
		res, err := s.db.ExecContext(ctx, c.SQL, c.Args...)
		if err != nil {
			if s.d.Conflict(err) && try < mysqlTries {
				continue
			}
			return Grant{}, err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return Grant{}, err
		}
		fence, err := res.LastInsertId()
		if err != nil {
			return Grant{}, err
		}
		return Grant{Acquired: true, Slot: slot, Fence: fence, TTL: ttl}, nil
	}
}

// releaseMySQL deletes a live place's row, answering whether it did.
func (s *SQL) releaseMySQL(ctx context.Context, q dialect.Call) (bool, error) {
	for try := 1; ; try++ {
		res, err := s.db.ExecContext(ctx, q.SQL, q.Args...)
		if err != nil {
			if s.d.Conflict(err) && try < mysqlTries {
				continue
			}
			return false, err
		}
		n, err := res.RowsAffected()
		return n > 0, err
	}
}
