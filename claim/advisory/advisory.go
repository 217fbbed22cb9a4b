// Package advisory is the claim form that holds claimed rows under session
// advisory locks: pg_try_advisory_lock on Postgres, GET_LOCK on MariaDB.
//
// A claim pins one pool connection and takes an advisory lock on each of
// the rows it keeps (its key is the table's lock class and the row's id), then
// reads them again, since a previous holder may have deleted or delayed a
// row between the look and the lock. Every job of one claim shares the
// pinned connection, which goes back to the pool when the last of them is
// settled. Ack deletes the row, then unlocks it once the delete has
// committed (on Postgres in one round trip); acks of one claim that queue
// together share one delete. When the holder dies its session ends and the
// database frees its locks at once: there is no lease to wait out. It holds one connection per
// claim batch rather than one per job, and serves Postgres and MariaDB
// (10.5+: its acks use DELETE ... RETURNING, which MySQL lacks).
//
//	sub, err := inbox.Subscribe(b, q, handle, inbox.Form(advisory.Form), inbox.Workers(8))
package advisory

import (
	"context"
	"database/sql"
	"fmt"
	"hash/fnv"
	"math"
	"sync/atomic"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/claim"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/internal/testsignal"
)

// Form is the advisory-lock form.
var Form claim.Form = form{}

// Class is the advisory lock class (the first key of
// pg_advisory_lock(int, int)) of the inbox table named table, as the user
// gave its name: the FNV-1a hash of the name, made non-negative. The second
// key is the row's id mod 2^32. In pg_locks a row's lock shows as
// locktype 'advisory', classid Class(table), objid the id, objsubid 2. On
// MariaDB/MySQL a row's lock is the user lock named
// sqlinbox.<hash of the database's name>.<Class(table)>.<id> (see
// dialect.AdvisoryLockName); IS_USED_LOCK(name) gives its holder.
// Tables whose classes collide, or ids 2^32 apart on Postgres, only wait
// for each other: no row ever has two holders.
func Class(table string) int32 {
	h := fnv.New32a()
	h.Write([]byte(table))
	return int32(h.Sum32() & 0x7fffffff)
}

type form struct{}

func (form) Name() string { return "advisory" }

func (form) Supports(d *dialect.Dialect) error {
	if err := claim.SessionLocksOnly("advisory", "rows with advisory locks (pg_try_advisory_lock, GET_LOCK) on a pinned session", d); err != nil {
		return err
	}
	if s := d.Server(); d.Kind == dialect.MySQL && s != nil && !s.MariaDB {
		// Its acks delete with DELETE ... RETURNING, which MariaDB has and
		// MySQL 8 has not.
		return fmt.Errorf("the advisory form needs MariaDB 10.6+ on a MySQL-protocol server (its acks use DELETE ... RETURNING); MySQL %s cannot serve it: use lease.Form or rowlock.Form", s.Version)
	}
	return nil
}

// HoldsSession marks a form whose holds live in the server session: a
// pooler in transaction mode cannot serve it, and Subscribe refuses it there.
func (form) HoldsSession() {}

func (f form) New(env claim.Env) (claim.Claimer, error) {
	if err := claim.CheckEnv(f, env); err != nil {
		return nil, err
	}
	return &claimer{env: env, class: Class(env.Table.Unquoted)}, nil
}

// maxRounds bounds how often one claim looks further when other sessions
// took candidates from under it.
const maxRounds = 4

// maxWalk bounds the rows one lock statement tries.
const maxWalk = 8192

// walkSlack is how many rows one lock statement tries beyond twice the
// rows it wants, to step past rows other sessions hold.
const walkSlack = 32

type claimer struct {
	env   claim.Env
	class int32
	held  atomic.Int64 // pinned connections: claims in flight and batches in work

	// locked is reached between the lock and the reread, with the ids
	// locked: the moment a previous holder may delete or delay a row. Only
	// a test arms it (see testsignal).
	locked testsignal.Signal[[]int64]
}

// Traits: one claim takes a row for every free worker, all on one pinned
// connection; for a transactional handler one row, since its transaction
// has the claim's connection to itself while it runs (see BeginTx).
func (c *claimer) Traits() claim.Traits {
	t := claim.Traits{PinsConnection: true, ClaimLimit: dialect.MaxClaim, ConcurrentWriters: c.env.Dialect.ConcurrentWriters()}
	if c.env.Transactional {
		t.RowsPerClaim = 1
	}
	return t
}

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
	p := newPin(c, conn)
	// A row finished by another session between this statement's snapshot
	// and its lock is locked, then found gone by the re-read: the lowest ids,
	// the ones claims look at first, are exactly those being finished. Such
	// a round does not mean the table is empty: look again.
	var jobs []*claim.Job
	after := cursor{pri: math.MinInt32, id: math.MinInt64}
	for round := 0; round < maxRounds && len(jobs) < max; round++ {
		ids, err := c.lock(ctx, conn, max-len(jobs), &after)
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
		c.locked.Reach(ids)
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
		q := c.env.SQL.Unlock.Call(c.class, gone)
		if _, err := conn.ExecContext(ctx, q.SQL, q.Args...); err != nil {
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
	var claimed time.Time
	if c.env.History != nil {
		claimed = c.env.Clock.Now()
	}
	for _, j := range jobs {
		j.Settler = &held{p: p, id: j.ID, claimed: claimed}
	}
	p.watch.Start()
	return jobs, nil
}

// cursor is the last row a claim tried, in claim order: priority (0 on a
// table without priorities), then id.
type cursor struct{ pri, id int64 }

func (a cursor) less(b cursor) bool { return a.pri < b.pri || a.pri == b.pri && a.id < b.id }

// lock tries locks on available rows after *after until it holds max or
// the table has no more candidates, and returns the ids it holds. It moves
// *after past every row it tried: a session may take its own advisory lock
// again (the locks count), so a claim must never try one row twice.
func (c *claimer) lock(ctx context.Context, conn *sql.Conn, max int, after *cursor) ([]int64, error) {
	e := &c.env
	var ids []int64
	for round := 0; len(ids) < max; round++ {
		want := max - len(ids)
		// Rows other sessions hold are tried too, and fail: they are the
		// lowest ids, those in work. The slack lets one step past them;
		// a round that tried all it could and still wants rows walks on
		// with twice the reach, so any number of held rows is passed, in
		// a few rounds (the walk ends at the table's end in any case).
		try := min((2*want+walkSlack)<<min(round, 8), maxWalk)
		q := e.SQL.LockAvailable.Call(e.Clock.Now(), want, e.Group, c.class, after.id, after.pri, try)
		rows, err := conn.QueryContext(ctx, q.SQL, q.Args...)
		if err != nil {
			return nil, c.fail("lock", err)
		}
		tried := 0
		for rows.Next() {
			var (
				at     cursor
				locked bool
			)
			if err := rows.Scan(&at.id, &locked, &at.pri); err != nil {
				rows.Close()
				return nil, c.fail("lock", err)
			}
			tried++
			if after.less(at) {
				*after = at
			}
			if locked {
				ids = append(ids, at.id)
			}
		}
		if err := rows.Err(); err != nil {
			rows.Close()
			return nil, c.fail("lock", err)
		}
		if err := rows.Close(); err != nil {
			return nil, c.fail("lock", err)
		}
		if tried < e.SQL.LockAvailable.Reach(want, try) {
			break // the walk reached the limit, or the end of the table
		}
	}
	return ids, nil
}

// reread reads the locked rows again and returns those still available: a
// previous holder may have deleted or delayed one between the look and the
// lock.
func (c *claimer) reread(ctx context.Context, conn *sql.Conn, ids []int64) ([]*claim.Job, error) {
	e := &c.env
	now := e.Clock.Now()
	if e.SQL.CountLocked.SQL() != "" {
		q := e.SQL.CountLocked.Call(ids, now)
		if _, err := conn.ExecContext(ctx, q.SQL, q.Args...); err != nil {
			return nil, c.fail("count the locked rows' attempt", err)
		}
	}
	q := e.SQL.Reread.Call(ids, now)
	rows, err := conn.QueryContext(ctx, q.SQL, q.Args...)
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
