// Package advisory is the claim form that holds claimed rows under Postgres
// session advisory locks.
//
// A claim pins one pool connection and takes pg_try_advisory_lock on the
// rows it keeps (the key is the table's lock class and the row's id), then
// reads them again, since a previous holder may have deleted or delayed a
// row between the look and the lock. Every job of one claim shares the
// pinned connection, which goes back to the pool when the last of them is
// settled. Ack deletes the row, then unlocks it. When the holder dies its
// session ends and Postgres frees its locks at once: there is no lease to
// wait out. It holds one connection per claim batch rather than one per
// job, and serves Postgres only.
//
//	sub, err := inbox.Subscribe(b, q, handle, inbox.Form(advisory.Form), inbox.Workers(8))
package advisory

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"github.com/jackc/pgx/v5/stdlib"
	"hash/fnv"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlinbox/sqlinbox/claim"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// Form is the advisory-lock form.
var Form claim.Form = form{}

// Class is the advisory lock class (the first key of
// pg_advisory_lock(int, int)) of the inbox table named table, as the user
// gave its name: the FNV-1a hash of the name, made non-negative. The second
// key is the row's id mod 2^32. In pg_locks a row's lock shows as
// locktype 'advisory', classid Class(table), objid the id, objsubid 2.
// Tables whose classes collide, or ids 2^32 apart, only wait for each
// other: no row ever has two holders.
func Class(table string) int32 {
	h := fnv.New32a()
	h.Write([]byte(table))
	return int32(h.Sum32() & 0x7fffffff)
}

type form struct{}

func (form) Name() string { return "advisory" }

func (form) Supports(d *dialect.Dialect) error {
	return claim.PostgresOnly("advisory", "rows with pg_try_advisory_lock on a pinned session", d)
}

func (f form) New(env claim.Env) (claim.Claimer, error) {
	if err := claim.CheckEnv(f, env); err != nil {
		return nil, err
	}
	return &claimer{env: env, class: Class(env.Table.Unquoted)}, nil
}

// afterLock, when set by a test, runs between the lock and the reread: the
// moment a previous holder may delete or delay a row.
var afterLock func(ids []int64)

// maxRounds bounds how often one claim looks further when other sessions
// took candidates from under it.
const maxRounds = 4

type claimer struct {
	env   claim.Env
	class int32
	held  atomic.Int64 // pinned connections: claims in flight and batches in work
}

// Batch is zero: one claim takes a row for every free worker, all on one
// connection.
func (c *claimer) Batch() int { return 0 }

// Held counts pinned connections, claims in flight included.
func (c *claimer) Held() int { return int(c.held.Load()) }

func (c *claimer) fail(what string, err error) error {
	return fmt.Errorf("claim from %q (advisory): %s: %w", c.env.Table.Unquoted, what, err)
}

// Claim locks up to max available rows on one pinned connection.
func (c *claimer) Claim(ctx context.Context, max int) ([]*claim.Job, error) {
	if max < 1 {
		return nil, nil
	}
	if c.env.Budget != nil {
		if err := c.env.Budget.Acquire(ctx); err != nil {
			return nil, err
		}
	}
	// Counted before the connection is asked for, so Held never reads less
	// than the connections in use.
	c.held.Add(1)
	conn, err := c.env.DB.Conn(ctx)
	if err != nil {
		c.held.Add(-1)
		if c.env.Budget != nil {
			c.env.Budget.Release()
		}
		return nil, c.fail("take a connection", err)
	}
	p := &pin{c: c, conn: conn}
	// A row finished by another session between this statement's snapshot
	// and its lock is locked, then found gone by the re-read: the lowest ids,
	// the ones claims look at first, are exactly those being finished. Such
	// a round does not mean the table is empty: look again.
	var jobs []*claim.Job
	for round := 0; round < maxRounds && len(jobs) < max; round++ {
		ids, err := c.lock(ctx, conn, max-len(jobs))
		if err != nil {
			// Locks may have been taken whose ids never arrived: the
			// session must end, which frees them all.
			p.dirty = true
			p.close()
			return nil, err
		}
		if len(ids) == 0 {
			break
		}
		if afterLock != nil {
			afterLock(ids)
		}
		got, err := c.reread(ctx, conn, ids)
		if err != nil {
			p.dirty = true
			p.close()
			return nil, err
		}
		kept := make(map[int64]bool, len(got))
		for _, j := range got {
			kept[j.ID] = true
		}
		var gone []int64
		for _, id := range ids {
			if !kept[id] {
				gone = append(gone, id)
			}
		}
		jobs = append(jobs, got...)
		if len(gone) == 0 {
			break
		}
		if _, err := conn.ExecContext(ctx, c.env.SQL.Unlock, c.class, gone); err != nil {
			p.dirty = true
			p.close()
			return nil, c.fail("unlock rows gone since the look", err)
		}
	}
	if len(jobs) == 0 {
		p.close()
		return nil, nil
	}
	p.refs = len(jobs)
	for _, j := range jobs {
		j.Settler = &held{p: p, id: j.ID}
	}
	return jobs, nil
}

// lock tries locks on available rows until it holds max or the table has
// no more candidates, and returns the ids it holds.
func (c *claimer) lock(ctx context.Context, conn *sql.Conn, max int) ([]int64, error) {
	e := &c.env
	var ids []int64
	after := int64(math.MinInt64)
	for round := 0; round < maxRounds && len(ids) < max; round++ {
		want := max - len(ids)
		rows, err := conn.QueryContext(ctx, e.SQL.LockAvailable,
			e.Table.Times.Arg(e.Clock.Now(), 0), want, e.Group, c.class, after)
		if err != nil {
			return nil, c.fail("lock", err)
		}
		cands := 0
		for rows.Next() {
			var (
				id     int64
				locked bool
			)
			if err := rows.Scan(&id, &locked); err != nil {
				rows.Close()
				return nil, c.fail("lock", err)
			}
			cands++
			after = max64(after, id)
			if locked {
				ids = append(ids, id)
			}
		}
		if err := rows.Err(); err != nil {
			rows.Close()
			return nil, c.fail("lock", err)
		}
		if err := rows.Close(); err != nil {
			return nil, c.fail("lock", err)
		}
		if cands < want {
			break // no more candidates above the last
		}
	}
	return ids, nil
}

// reread reads the locked rows again and returns those still available: a
// previous holder may have deleted or delayed one between the look and the
// lock.
func (c *claimer) reread(ctx context.Context, conn *sql.Conn, ids []int64) ([]*claim.Job, error) {
	e := &c.env
	rows, err := conn.QueryContext(ctx, e.SQL.Reread, ids, e.Table.Times.Arg(e.Clock.Now(), 0))
	if err != nil {
		return nil, c.fail("read locked rows", err)
	}
	defer rows.Close()
	jobs := make([]*claim.Job, 0, len(ids))
	for rows.Next() {
		j, err := claim.ScanJob(e.Table, rows.Scan)
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, c.fail("read locked rows", err)
	}
	return jobs, nil
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// pin is one claim's connection, shared by its jobs until the last is
// settled.
type pin struct {
	c    *claimer
	conn *sql.Conn

	mu    sync.Mutex // one statement at a time on the connection
	refs  int        // jobs not yet settled
	dirty bool       // a lock may be left on the session: it must end
}

// close gives the connection back to the pool, or ends it when a lock may
// be left on it, and uncounts it.
func (p *pin) close() {
	if p.dirty {
		// First ask the session to drop every advisory lock it holds; a
		// pool that keeps sessions alive behind database/sql (a broker on a
		// *pgxpool.Pool) would otherwise get the session back with its locks.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := p.conn.ExecContext(ctx, "SELECT pg_advisory_unlock_all()")
		cancel()
		if err != nil {
			// Then end the session itself: closing the pgx connection ends
			// it whatever pool is behind, and ErrBadConn keeps database/sql
			// from pooling it.
			_ = p.conn.Raw(func(dc any) error {
				if sc, ok := dc.(*stdlib.Conn); ok {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					_ = sc.Conn().Close(ctx)
				}
				return driver.ErrBadConn
			})
		}
	}
	p.conn.Close()
	p.c.held.Add(-1)
	if p.c.env.Budget != nil {
		p.c.env.Budget.Release()
	}
}

// held is one job of a claim: a row locked on the claim's connection.
type held struct {
	p    *pin
	id   int64
	done bool // guarded by p.mu
}

// settle runs one statement on the row (none for a release), then unlocks
// it on the same session. A failed statement still unlocks, so the row is
// free at once and the settlement changed nothing: that is claim.ErrLost.
func (h *held) settle(ctx context.Context, what, query string, args ...any) error {
	p := h.p
	e := &p.c.env
	p.mu.Lock()
	defer p.mu.Unlock()
	if h.done {
		return fmt.Errorf("%s row %d of %q (advisory): already settled", what, h.id, e.Table.Unquoted)
	}
	h.done = true
	var err error
	if query != "" {
		var res sql.Result
		res, err = p.conn.ExecContext(ctx, query, args...)
		if err == nil {
			if n, rerr := res.RowsAffected(); rerr == nil && n == 0 {
				err = claim.ErrLost // deleted by someone who ignores the lock
			}
		}
	}
	if _, uerr := p.conn.ExecContext(ctx, e.SQL.Unlock, p.c.class, []int64{h.id}); uerr != nil {
		p.dirty = true
		if err == nil {
			err = fmt.Errorf("unlock: %w", uerr)
		}
	}
	if p.refs--; p.refs == 0 {
		p.close()
	}
	switch {
	case err == nil:
		return nil
	case err == claim.ErrLost:
		return fmt.Errorf("%s row %d of %q (advisory): %w", what, h.id, e.Table.Unquoted, err)
	case query == "":
		return fmt.Errorf("%s row %d of %q (advisory): %w", what, h.id, e.Table.Unquoted, err)
	default:
		return fmt.Errorf("%s row %d of %q (advisory): %w: %w", what, h.id, e.Table.Unquoted, claim.ErrLost, err)
	}
}

// Ack deletes the row, then unlocks it.
func (h *held) Ack(ctx context.Context) error {
	return h.settle(ctx, "ack", h.p.c.env.SQL.Delete, h.id)
}

// Retry sets the row's time to now+delay, counts the attempt, and unlocks.
func (h *held) Retry(ctx context.Context, delay time.Duration, lastError string) error {
	e := &h.p.c.env
	return h.settle(ctx, "retry", e.SQL.RetryLocked, h.id, nil, e.Table.Times.Arg(e.Clock.Now(), delay), nullable(lastError))
}

// Park sets the row aside for good, and unlocks.
func (h *held) Park(ctx context.Context, lastError string) error {
	e := &h.p.c.env
	return h.settle(ctx, "park", e.SQL.ParkLocked, h.id, nil, e.Table.Times.Encode(dialect.Never), nullable(lastError))
}

// Release unlocks the row, unchanged.
func (h *held) Release(ctx context.Context) error {
	return h.settle(ctx, "release", "")
}

// Extend does nothing: an advisory lock lasts as long as its session.
func (h *held) Extend(context.Context, time.Duration) error { return nil }

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}
