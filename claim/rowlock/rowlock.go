// Package rowlock is the claim form that holds each claimed row under a
// row lock for as long as its handler runs.
//
// A claim locks one row (FOR UPDATE SKIP LOCKED, one row at a time) on a
// connection of its own and holds it in a transaction that stays open while
// the handler runs. Ack deletes the row and commits; retry and park update
// it and commit; release rolls back. Where the table counts attempts, the
// claim first counts the row's attempt in a statement committed on its own,
// with a two-second lease that keeps other claimers off until the
// transaction locks the row: the attempt is counted even when the holder
// dies. When the holder dies its connection closes, Postgres rolls the
// transaction back and the row is free at once (within the two seconds of
// that lease where attempts are counted). A read waits on the idle
// connection while the handler runs, so a hold lost with its connection is
// told at once (claim.Holder). The price is one pool connection per job in
// work. It serves Postgres, MariaDB (10.6+) and MySQL (8.0.13+).
//
//	sub, err := inbox.Subscribe(b, q, handle, inbox.Form(rowlock.Form), inbox.Workers(8))
package rowlock

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/claim"
	"github.com/sqlinbox/sqlinbox/internal/claim/contract"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/internal/inboxtype"
)

// Form is the row-lock form.
var Form claim.Form = form{}

type form struct{}

func (form) Name() string { return "rowlock" }

func (form) Supports(d *dialect.Dialect) error {
	return claim.RowLocksOnly("rowlock", "a row lock (FOR UPDATE SKIP LOCKED) in a transaction per job", d)
}

func (f form) New(env claim.Env) (claim.Claimer, error) {
	if err := claim.CheckEnv(f, env); err != nil {
		return nil, err
	}
	return &claimer{env: env, query: env.SQL.SelectAvailable}, nil
}

type claimer struct {
	env   claim.Env
	query dialect.SelectAvailableSQL
	held  atomic.Int64 // connections taken: claims in flight and jobs in work
	mark  claim.Mark   // where the next claim starts (see claim.Mark)
}

// Traits: one row a claim, each holding a transaction, and so a
// connection, of its own.
func (c *claimer) Traits() claim.Traits {
	return claim.Traits{RowsPerClaim: 1, PinsConnection: true, ConcurrentWriters: c.env.Dialect.ConcurrentWriters()}
}

// Held counts the connections the form holds, claims in flight included.
func (c *claimer) Held() int { return int(c.held.Load()) }

// Floor is where the next claim after a short one starts (engine.Floorer).
func (c *claimer) Floor() int64 { return c.mark.Floor() }

// Claim takes at most one row, whatever max is: each job needs a
// transaction, and so a connection, of its own.
func (c *claimer) Claim(ctx context.Context, max int) ([]*claim.Job, error) {
	if max < 1 {
		return nil, nil
	}
	e := &c.env
	if e.Budget != nil {
		if err := e.Budget.Acquire(ctx); err != nil {
			return nil, err
		}
	}
	// Counted before the connection is asked for, so Held never reads less
	// than the connections in use.
	c.held.Add(1)
	conn, err := e.DB.Conn(ctx)
	if err != nil {
		c.uncount()
		return nil, fmt.Errorf("claim from %q (rowlock): take a connection: %w", e.Table.Unquoted, err)
	}
	counted := e.SQL.ClaimHold.SQL() != ""
	var j *claim.Job
	if counted {
		if j, err = c.takeCounted(ctx, conn); err != nil || j == nil {
			conn.Close()
			c.uncount()
			return nil, err
		}
	}
	// The transaction outlives the claim's context: it lasts until the job
	// is settled.
	tx, err := conn.BeginTx(context.WithoutCancel(ctx), e.Dialect.HoldTx())
	if err != nil {
		conn.Close()
		c.uncount()
		return nil, fmt.Errorf("claim from %q (rowlock): begin: %w", e.Table.Unquoted, err)
	}
	h := &hold{c: c, conn: conn, tx: tx, watch: claim.NewConnWatch(conn)}
	if counted {
		j, err = c.lockCounted(ctx, tx, j)
	} else {
		j, err = c.take(ctx, tx)
	}
	if err != nil || j == nil {
		h.end(false)
		return nil, err
	}
	h.id, h.counted = j.ID, e.SQL.ClaimHold.SQL() != ""
	if e.History != nil {
		h.claimed = e.Clock.Now()
	}
	j.Settler = h
	h.watch.Start()
	return []*claim.Job{j}, nil
}

// holdGap is the lease takeCounted writes: it keeps other claimers off the
// row between its two steps, and is all that holds the row once its holder
// died.
const holdGap = 2 * time.Second

// takeCounted takes the first available row in a statement of its own,
// before the holder's transaction: it counts the row's attempt and writes a
// short lease, and commits, so the attempt stays counted whatever becomes
// of the holder. lockCounted then locks the row in the transaction.
func (c *claimer) takeCounted(ctx context.Context, conn *sql.Conn) (*claim.Job, error) {
	e := &c.env
	now := e.Clock.Now()
	q := e.SQL.ClaimHold.Call(now, holdGap, e.Group, c.mark.Start(now, e.Rescan))
	if e.SQL.ClaimThen.SQL() != "" {
		return c.takeCountedThen(ctx, conn, q)
	}
	rows, err := conn.QueryContext(ctx, q.SQL, q.Args...)
	return c.first(rows, err)
}

// takeCountedThen is takeCounted where the database has no UPDATE ...
// RETURNING (MySQL): ClaimHold's select locks the row and reads it as the
// step leaves it, ClaimThen writes the lease and the attempt, and the
// transaction commits (see dialect.ClaimThenSQL).
func (c *claimer) takeCountedThen(ctx context.Context, conn *sql.Conn, q dialect.Call) (*claim.Job, error) {
	e := &c.env
	tx, err := conn.BeginTx(ctx, e.Dialect.HoldTx())
	if err != nil {
		return nil, fmt.Errorf("claim from %q (rowlock): begin: %w", e.Table.Unquoted, err)
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, q.SQL, q.Args...)
	j, err := c.first(rows, err)
	if err != nil || j == nil {
		return nil, err
	}
	then := e.SQL.ClaimThen.Call(j.Lease, []int64{j.ID})
	if _, err := tx.ExecContext(ctx, then.SQL, then.Args...); err != nil {
		return nil, fmt.Errorf("claim from %q (rowlock): %w", e.Table.Unquoted, err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("claim from %q (rowlock): %w", e.Table.Unquoted, err)
	}
	return j, nil
}

// lockCounted locks the row takeCounted took, by the lease it wrote: a row
// whose lease changed in between (the step outlived the lease) is someone
// else's, and none is taken.
func (c *claimer) lockCounted(ctx context.Context, tx *sql.Tx, j *claim.Job) (*claim.Job, error) {
	e := &c.env
	q := e.SQL.HoldOne.Call(j.ID, j.Lease)
	// Read, not counted from the result: MySQL counts no rows a SELECT
	// returns as affected.
	rows, err := tx.QueryContext(ctx, q.SQL, q.Args...)
	if err != nil {
		return nil, fmt.Errorf("claim from %q (rowlock): lock row %d: %w", e.Table.Unquoted, j.ID, err)
	}
	locked := rows.Next()
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claim from %q (rowlock): lock row %d: %w", e.Table.Unquoted, j.ID, err)
	}
	if !locked {
		return nil, nil
	}
	return j, nil
}

// take selects and locks the first available row, or returns nil.
func (c *claimer) take(ctx context.Context, tx *sql.Tx) (*claim.Job, error) {
	e := &c.env
	now := e.Clock.Now()
	q := c.query.Call(now, e.Group, c.mark.Start(now, e.Rescan))
	rows, err := tx.QueryContext(ctx, q.SQL, q.Args...)
	return c.first(rows, err)
}

// first reads the one row a claim statement returned, or nil, and moves
// the mark by what it took.
func (c *claimer) first(rows *sql.Rows, err error) (*claim.Job, error) {
	e := &c.env
	if err != nil {
		return nil, fmt.Errorf("claim from %q (rowlock): %w", e.Table.Unquoted, err)
	}
	defer rows.Close()
	var j *claim.Job
	if rows.Next() {
		if j, err = claim.ScanJob(e.Table, rows.Scan); err != nil {
			return nil, err
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claim from %q (rowlock): %w", e.Table.Unquoted, err)
	}
	if err := rows.Close(); err != nil {
		return nil, fmt.Errorf("claim from %q (rowlock): %w", e.Table.Unquoted, err)
	}
	if j == nil {
		c.mark.Claimed(false, nil)
		return nil, nil
	}
	c.mark.Claimed(true, []*claim.Job{j})
	return j, nil
}

// hold is one claimed row: its transaction and the connection under it.
type hold struct {
	c    *claimer
	id   int64
	conn *sql.Conn
	tx   *sql.Tx

	watch   *claim.ConnWatch
	counted bool // the claim counted an attempt, committed
	// claimed is when the claim took the row, for the history's duration
	// (set only where the subscription keeps a history).
	claimed time.Time

	mu   sync.Mutex
	done bool
}

// Hold ends when the transaction's connection is seen to end.
func (h *hold) Hold() context.Context { return h.watch.Hold() }

// Forget ends the hold of a job that will never be settled.
func (h *hold) Forget() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.done {
		h.done = true
		h.end(false)
	}
}

// end commits or rolls back the transaction and gives the connection back
// to the pool. A failed commit rolls back: the row is free again.
func (h *hold) end(commit bool) error {
	if h.watch != nil {
		h.watch.End()
	}
	var err error
	if commit {
		err = h.tx.Commit()
	} else {
		err = h.tx.Rollback()
	}
	h.conn.Close()
	h.c.uncount()
	return err
}

// uncount gives back a connection's count and budget.
func (c *claimer) uncount() {
	c.held.Add(-1)
	if c.env.Budget != nil {
		c.env.Budget.Release()
	}
}

// settle runs one statement on the held row, then commits. Any failure
// rolls the transaction back, which frees the row at once: the holder holds
// it no more and its settlement changed nothing, so it is reported as
// claim.ErrLost.
func (h *hold) settle(ctx context.Context, what string, q dialect.Call) error {
	if q.SQL == "" {
		return h.settleBy(ctx, what, nil)
	}
	return h.settleBy(ctx, what, func(ctx context.Context) (bool, error) {
		res, err := h.tx.ExecContext(ctx, q.SQL, q.Args...)
		if err != nil {
			return false, err
		}
		n, rerr := res.RowsAffected()
		return rerr != nil || n > 0, nil
	})
}

// settleBy is settle with the statements run by exec, which says whether
// they changed the row; nil exec rolls back.
func (h *hold) settleBy(ctx context.Context, what string, exec func(context.Context) (changed bool, err error)) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := &h.c.env
	if h.done {
		return fmt.Errorf("%s row %d of %q (rowlock): already settled", what, h.id, e.Table.Unquoted)
	}
	h.done = true
	h.watch.Pause()
	if h.watch.Lost() {
		h.end(false)
		return fmt.Errorf("%s row %d of %q (rowlock): %w: %w", what, h.id, e.Table.Unquoted, claim.ErrLost, inboxtype.ErrHoldLost)
	}
	if exec == nil {
		h.end(false)
		return nil
	}
	// Bounds the statement that settles the row: database/sql's Commit
	// after it takes no context.
	ctx, cancel := context.WithTimeout(ctx, contract.SettleTimeout)
	defer cancel()
	changed, err := exec(ctx)
	if err == nil && !changed {
		// The row is locked by this transaction: it cannot be gone.
		// Said anyway rather than assumed.
		h.end(false)
		return fmt.Errorf("%s row %d of %q (rowlock): %w", what, h.id, e.Table.Unquoted, claim.ErrLost)
	}
	if err != nil {
		h.end(false)
		return fmt.Errorf("%s row %d of %q (rowlock): %w: %w", what, h.id, e.Table.Unquoted, claim.ErrLost, err)
	}
	if err := h.end(true); err != nil {
		return fmt.Errorf("%s row %d of %q (rowlock): commit: %w: %w", what, h.id, e.Table.Unquoted, claim.ErrLost, err)
	}
	return nil
}

// Ack deletes the row, or moves it into the history, and commits.
func (h *hold) Ack(ctx context.Context) error {
	e := &h.c.env
	if e.History == nil {
		return h.settle(ctx, "ack", e.SQL.Delete.Call(h.id))
	}
	return h.settleBy(ctx, "ack", func(ctx context.Context) (bool, error) {
		now := e.Clock.Now()
		moved, err := e.History.Move(ctx, h.tx, nil, []dialect.Fenced{{ID: h.id, Took: now.Sub(h.claimed)}}, false, now)
		return moved[h.id], err
	})
}

// Retry sets the row's time to now+delay, counts the attempt and commits.
func (h *hold) Retry(ctx context.Context, delay time.Duration, lastError string) error {
	e := &h.c.env
	return h.settle(ctx, "retry", e.SQL.RetryLocked.Call(h.id, e.Clock.Now(), delay, lastError))
}

// Park sets the row aside for good and commits.
func (h *hold) Park(ctx context.Context, lastError string) error {
	e := &h.c.env
	return h.settle(ctx, "park", e.SQL.ParkLocked.Call(h.id, lastError))
}

// Snooze sets the row's time to now+delay and gives its attempt back.
func (h *hold) Snooze(ctx context.Context, delay time.Duration) error {
	e := &h.c.env
	return h.settle(ctx, "snooze", e.SQL.SnoozeLocked.Call(h.id, e.Clock.Now(), delay))
}

// Release makes the row available at once, as it was before the claim;
// the next claim starts at the floor, as the row may lie behind the mark
// (claim.Mark.Released: a limit gives back a row whose slot another took).
func (h *hold) Release(ctx context.Context) error {
	q := dialect.Call{}
	if h.counted {
		q = h.c.env.SQL.ReleaseLocked.Call(h.id)
	}
	err := h.settle(ctx, "release", q)
	if err == nil {
		h.c.mark.Released()
	}
	return err
}

// Extend does nothing: a row lock lasts as long as its transaction.
func (h *hold) Extend(context.Context, time.Duration) error { return nil }
