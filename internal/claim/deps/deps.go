// Package deps releases the rows that wait for others (inbox.After) once
// their parents are settled. A subscription whose table has a table of
// edges (dialect.DepsSQL) wraps each claimed job's settler: after an ack
// has committed, the acked ids are batched (one release per batch of acks
// queued meanwhile) and their children that no other parent holds are set
// available; after a park has committed, the parent's policy is applied to
// its children (parked too, recursively; run; deleted). A release lost to
// a crash between an ack's commit and its release is found by Sweep: the
// edges still pending whose parent is gone or parked, and the rows still
// waiting that no edge holds.
//
// Why no lock is needed: each release's check runs after its own parent's
// ack (or park mark) committed, so of two parents settled at once the
// later check sees both; a child released twice is harmless, since the
// release is guarded on the child's locked_until still being
// dialect.Waiting.
package deps

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/internal/claim/contract"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/internal/groupcommit"
)

// Config is what a Releaser needs of its subscription.
type Config struct {
	DB     *sql.DB
	SQL    *dialect.DepsSQL
	Writer *dialect.Writer // SQLite's one write turn; nil elsewhere
	Clock  clock.Clock
	Table  string // for messages
	// Released, when set, is called after children were made available
	// (on the releasing goroutine; it must not block): the table's
	// subscriptions are woken.
	Released func()
	// Sweep is the least time between two sweeps for stranded edges.
	Sweep time.Duration
	Log   *slog.Logger
	// Conflict says a statement was rolled back for a deadlock or a lock
	// wait timeout (MariaDB/MySQL): it is sent again, a few times.
	Conflict func(error) bool
}

// Releaser releases the children of one subscription's settled rows.
type Releaser struct {
	cfg     Config
	acks    *groupcommit.Committer[int64]
	pending sync.WaitGroup

	// held is the connection the acks' releases run on while they follow
	// each other (see releaseHeld); only the committer's goroutine uses it.
	held *sql.Conn

	mu    sync.Mutex
	swept time.Time
	later []int64 // handed-off acks waiting for their linger (AckedLater)
	// quiet: the table of edges held none at the last look, so acks'
	// releases are not sent; their ids wait in skipped for the next look
	// (see look). looked is the last look's time (host time).
	quiet   bool
	looking bool // a look is due (quietLook after the first skip)
	skipped []int64
	looked  time.Time
}

// New returns the releaser of cfg.
func New(cfg Config) *Releaser {
	r := &Releaser{cfg: cfg}
	r.acks = groupcommit.New(groupcommit.Config[int64]{Flush: r.flush, Max: 1000, Rest: r.letGo})
	return r
}

// Wait waits for the releases queued so far: a subscription's Run returns
// once they are written.
func (r *Releaser) Wait() { r.pending.Wait() }

// conflictTries is how many times a release that met a conflict is sent.
const conflictTries = 3

// Acked queues the release of the children of an acked row and calls
// then once it is written (or failed: the sweep makes up for it). The
// settlement returns only then, so the claim the engine sends next finds
// the children released.
func (r *Releaser) Acked(id int64, then func()) {
	if r.skip(id) {
		then()
		return
	}
	r.pending.Add(1)
	r.acks.Submit(id, func(error) {
		r.pending.Done()
		then()
	})
}

// AckedLater queues the release of the children of an acked row that
// handed off to a row waiting for it alone (see HandedOff) and returns:
// that row was available at the ack's commit, so the release, which finds
// nothing to do unless other rows wait for this one, is sent after
// handOffLinger with the others acked meanwhile, instead of one read per
// hand-off beside the next claim.
func (r *Releaser) AckedLater(id int64) {
	r.pending.Add(1)
	r.mu.Lock()
	r.later = append(r.later, id)
	first := len(r.later) == 1
	r.mu.Unlock()
	if first {
		time.AfterFunc(handOffLinger, r.releaseLater)
	}
}

// quietLook is how long the acks skipped while the table of edges holds
// none wait for the look that tells whether one was written meanwhile;
// quietEvery is how often releases that made nothing available look
// whether it holds none.
const (
	quietLook  = 50 * time.Millisecond
	quietEvery = time.Second
)

// skip keeps the id of an acked row for the next look, while the table of
// edges held none at the last, and says so: its release is not sent.
func (r *Releaser) skip(id int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.quiet {
		return false
	}
	r.skipped = append(r.skipped, id)
	if !r.looking {
		r.looking = true
		r.pending.Add(1)
		time.AfterFunc(quietLook, r.lookAgain)
	}
	return true
}

// lookAgain looks whether the table of edges still holds none. An edge to
// a skipped row was written before that row's ack committed, so before
// the look, and only the row's release (or the sweep) deletes it: a look
// that finds none proves the skipped rows had no child. One that finds an
// edge ends the quiet: the skipped rows are released as any other, and so
// are the acks after.
func (r *Releaser) lookAgain() {
	defer r.pending.Done()
	r.mu.Lock()
	ids := r.skipped
	r.skipped = nil
	r.mu.Unlock()
	empty := r.look()
	r.mu.Lock()
	r.quiet = empty
	if empty && len(r.skipped) > 0 {
		r.pending.Add(1) // acked during the look: the next one covers them
		time.AfterFunc(quietLook, r.lookAgain)
	} else {
		r.looking = false
	}
	if !empty {
		ids = append(ids, r.skipped...)
		r.skipped = nil
	}
	r.mu.Unlock()
	if !empty {
		for _, id := range ids {
			r.pending.Add(1)
			r.acks.Submit(id, func(error) { r.pending.Done() })
		}
	}
}

// look reads whether the table of edges holds none (false on a failure).
func (r *Releaser) look() bool {
	ctx, cancel := context.WithTimeout(context.Background(), contract.SettleTimeout)
	defer cancel()
	q := r.cfg.SQL.AnyEdge()
	var one int
	err := r.cfg.DB.QueryRowContext(ctx, q.SQL, q.Args...).Scan(&one)
	r.mu.Lock()
	r.looked = time.Now()
	r.mu.Unlock()
	return errors.Is(err, sql.ErrNoRows)
}

// maybeQuiet, after a release that made nothing available, looks at most
// once a quietEvery whether the table of edges holds none; if so, the
// releases of the acks that follow are skipped (see skip).
func (r *Releaser) maybeQuiet() {
	r.mu.Lock()
	due := !r.quiet && time.Since(r.looked) >= quietEvery
	r.mu.Unlock()
	if due && r.look() {
		r.mu.Lock()
		r.quiet = true
		r.mu.Unlock()
	}
}

// handOffLinger is how long a hand-off's release waits for others'.
const handOffLinger = 10 * time.Millisecond

// releaseLater queues the releases AckedLater held.
func (r *Releaser) releaseLater() {
	r.mu.Lock()
	ids := r.later
	r.later = nil
	r.mu.Unlock()
	for _, id := range ids {
		r.acks.Submit(id, func(error) { r.pending.Done() })
	}
}

// flush releases the children of a batch of acked rows.
func (r *Releaser) flush(batch []int64, _ []error) {
	ctx, cancel := context.WithTimeout(context.Background(), contract.SettleTimeout)
	defer cancel()
	var n int
	var err error
	for try := 1; ; try++ {
		n, err = r.releaseHeld(ctx, batch)
		if err == nil || try >= conflictTries || r.cfg.Conflict == nil || !r.cfg.Conflict(err) {
			break
		}
	}
	if err != nil {
		r.cfg.Log.Warn("inbox: could not release the rows that wait for acked rows; a sweep releases them within seconds", "table", r.cfg.Table, "acked", len(batch), "err", err)
	}
	if err == nil && n == 0 {
		r.maybeQuiet()
	}
	if n > 0 && r.cfg.Released != nil {
		r.cfg.Released()
		// Again once the acks' settlements have returned: a subscription
		// of one worker whose short claim was in flight when the first
		// wake came left the released row for its poll (on Postgres, lease
		// and row-lock forms, about one round in ten of
		// TestDepsConcurrentAcksReleaseOnce).
		time.AfterFunc(secondWake, r.cfg.Released)
	}
}

// releaseHeld is Release on the connection held while releases follow each
// other, taken from the pool for the first and given back once none is
// queued (letGo). Each connection's first statement on the table of edges
// loads its catalog entries, about 5 ms of the database's time: spread
// over the pool, every connection of a new pool paid it (3-4 us a job in
// a drain of 200,000 rows over 150 connections).
func (r *Releaser) releaseHeld(ctx context.Context, acked []int64) (int, error) {
	if r.cfg.Writer != nil {
		// SQLite: a connection is taken after the write turn, never held
		// while waiting for it.
		return r.Release(ctx, acked)
	}
	if r.held == nil {
		c, err := r.cfg.DB.Conn(ctx)
		if err != nil {
			return 0, err
		}
		r.held = c
	}
	n, err := r.release(ctx, r.held, acked)
	if err != nil {
		r.letGo() // a connection that failed is not kept
	}
	return n, err
}

// letGo gives the held connection back to the pool: no release is queued.
func (r *Releaser) letGo() {
	if r.held != nil {
		_ = r.held.Close()
		r.held = nil
	}
}

// secondWake is when a release wakes the table's subscriptions again.
const secondWake = 50 * time.Millisecond

// Release marks the edges of acked rows acked, drops the edges of the
// acked rows themselves (as children), and makes available the children
// no parent holds any more. It returns how many it made available.
func (r *Releaser) Release(ctx context.Context, acked []int64) (int, error) {
	return r.release(ctx, r.cfg.DB, acked)
}

func (r *Releaser) release(ctx context.Context, db querier, acked []int64) (int, error) {
	if err := r.cfg.Writer.Lock(ctx); err != nil {
		return 0, err
	}
	defer r.cfg.Writer.Unlock()
	s := r.cfg.SQL
	if c := s.ToRelease(acked); c.SQL != "" {
		if found, err := r.readIDs(ctx, db, c); err != nil || len(found) == 0 {
			return 0, err
		}
	}
	if one := s.ReleaseAll(acked); one.SQL != "" {
		ids, err := r.readIDs(ctx, db, one)
		return len(ids), err
	}
	children, err := r.readIDs(ctx, db, s.MarkAcked(acked))
	if err != nil {
		return 0, err
	}
	if then := s.MarkAckedThen(acked); then.SQL != "" && len(children) > 0 {
		if err := r.exec(ctx, db, then); err != nil {
			return 0, err
		}
	}
	if err := r.exec(ctx, db, s.DropChildren(acked)); err != nil {
		return 0, err
	}
	ready, err := r.unblock(ctx, db, children)
	return len(ready), err
}

// unblock makes available the children that no edge holds any more (on
// Postgres passing over those another transaction has locked, see
// dialect.DepsSQL.Unblock).
func (r *Releaser) unblock(ctx context.Context, db querier, children []int64) ([]int64, error) {
	if len(children) == 0 {
		return nil, nil
	}
	s := r.cfg.SQL
	ready, err := r.readIDs(ctx, db, s.Unblock(children))
	if err != nil || len(ready) == 0 {
		return ready, err
	}
	if then := s.UnblockThen(ready); then.SQL != "" {
		return ready, r.exec(ctx, db, then)
	}
	return ready, nil
}

// failure is a parent that will not be acked: parked (or deleted by its
// own parent's policy), with what its children's last error says.
type failure struct {
	id   int64
	what string // "parked", "deleted"
	err  string
}

// Parked applies the policies of the children of parent, parked with
// lastError: each child parked with a last error naming the parent
// (recursively to its own children), run once its other parents are
// settled, or deleted. Called once the park has committed.
func (r *Releaser) Parked(ctx context.Context, parent int64, lastError string) error {
	if err := r.cfg.Writer.Lock(ctx); err != nil {
		return err
	}
	defer r.cfg.Writer.Unlock()
	queue := []failure{{id: parent, what: "parked", err: lastError}}
	released := 0
	for len(queue) > 0 {
		f := queue[0]
		queue = queue[1:]
		more, n, err := r.fail(ctx, f)
		if err != nil {
			return fmt.Errorf("apply the policies of the rows that wait for row %d of %q: %w", f.id, r.cfg.Table, err)
		}
		queue = append(queue, more...)
		released += n
	}
	if released > 0 && r.cfg.Released != nil {
		r.cfg.Released()
	}
	return nil
}

// fail marks f's edges failed and applies their policies: it returns the
// children parked or deleted (failures in turn) and how many it made
// available.
func (r *Releaser) fail(ctx context.Context, f failure) ([]failure, int, error) {
	s := r.cfg.SQL
	var run, park, del []int64
	err := r.query(ctx, r.cfg.DB, s.MarkFailed(f.id), func(rows *sql.Rows) error {
		var child int64
		var policy int
		if err := rows.Scan(&child, &policy); err != nil {
			return err
		}
		switch policy {
		case dialect.PolicyRun:
			run = append(run, child)
		case dialect.PolicyDelete:
			del = append(del, child)
		default:
			park = append(park, child)
		}
		return nil
	})
	if err != nil || len(run)+len(park)+len(del) == 0 {
		return nil, 0, err
	}
	if then := s.MarkFailedThen(f.id); then.SQL != "" {
		if err := r.exec(ctx, r.cfg.DB, then); err != nil {
			return nil, 0, err
		}
	}
	msg := fmt.Sprintf("parent %d %s: %s", f.id, f.what, f.err)
	var out []failure
	if len(park) > 0 {
		parked, err := r.readIDs(ctx, r.cfg.DB, s.ParkWaiting(park, msg))
		if err != nil {
			return nil, 0, err
		}
		if then := s.ParkWaitingThen(parked, msg); then.SQL != "" && len(parked) > 0 {
			if err := r.exec(ctx, r.cfg.DB, then); err != nil {
				return nil, 0, err
			}
		}
		for _, id := range parked {
			out = append(out, failure{id: id, what: "parked", err: msg})
		}
	}
	if len(del) > 0 {
		deleted, err := r.readIDs(ctx, r.cfg.DB, s.DeleteWaiting(del))
		if err != nil {
			return nil, 0, err
		}
		if len(deleted) > 0 {
			if then := s.DeleteWaitingThen(deleted); then.SQL != "" {
				if err := r.exec(ctx, r.cfg.DB, then); err != nil {
					return nil, 0, err
				}
			}
			if err := r.exec(ctx, r.cfg.DB, s.DropChildren(deleted)); err != nil {
				return nil, 0, err
			}
		}
		for _, id := range deleted {
			out = append(out, failure{id: id, what: "deleted", err: msg})
		}
	}
	ready, err := r.unblock(ctx, r.cfg.DB, run)
	return out, len(ready), err
}

// Sweep releases the children of edges stranded by a crash: still pending
// while their parent is gone (acked) or parked. It runs at most once a
// Config.Sweep, and reads a batch of parents each time.
func (r *Releaser) Sweep(ctx context.Context) {
	now := r.cfg.Clock.Now()
	r.mu.Lock()
	due := now.Sub(r.swept) >= r.cfg.Sweep
	if due {
		r.swept = now
	}
	r.mu.Unlock()
	if !due {
		return
	}
	if err := r.sweep(ctx); err != nil && ctx.Err() == nil {
		r.cfg.Log.Warn("inbox: could not sweep the edges of rows that wait; trying again later", "table", r.cfg.Table, "err", err)
	}
}

func (r *Releaser) sweep(ctx context.Context) error {
	var gone []int64
	var parked []failure
	err := r.query(ctx, r.cfg.DB, r.cfg.SQL.Stranded(), func(rows *sql.Rows) error {
		var id int64
		var isGone int
		var lastError string
		if err := rows.Scan(&id, &isGone, &lastError); err != nil {
			return err
		}
		if isGone == 1 {
			gone = append(gone, id)
		} else {
			parked = append(parked, failure{id: id, what: "parked", err: lastError})
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(gone) > 0 {
		n, err := r.Release(ctx, gone)
		if err != nil {
			return err
		}
		if n > 0 && r.cfg.Released != nil {
			r.cfg.Released()
		}
	}
	for _, f := range parked {
		if err := r.Parked(ctx, f.id, f.err); err != nil {
			return err
		}
	}
	return r.sweepUnheld(ctx)
}

// sweepUnheld releases the children left waiting after their edges were
// marked: a release is several statements on SQLite and MariaDB, and a
// kill between the mark and the release leaves no edge pending.
func (r *Releaser) sweepUnheld(ctx context.Context) error {
	ids, err := r.readIDs(ctx, r.cfg.DB, r.cfg.SQL.Unheld())
	if err != nil || len(ids) == 0 {
		return err
	}
	if err := r.cfg.Writer.Lock(ctx); err != nil {
		return err
	}
	ready, err := r.unblock(ctx, r.cfg.DB, ids)
	r.cfg.Writer.Unlock()
	if len(ready) > 0 && r.cfg.Released != nil {
		r.cfg.Released()
	}
	return err
}

// querier is the pool, or the connection the acks' releases hold.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func (r *Releaser) exec(ctx context.Context, db querier, c dialect.Call) error {
	_, err := db.ExecContext(ctx, c.SQL, c.Args...)
	return err
}

func (r *Releaser) query(ctx context.Context, db querier, c dialect.Call, each func(*sql.Rows) error) error {
	rows, err := db.QueryContext(ctx, c.SQL, c.Args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

func (r *Releaser) readIDs(ctx context.Context, db querier, c dialect.Call) ([]int64, error) {
	var ids []int64
	err := r.query(ctx, db, c, func(rows *sql.Rows) error {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return err
		}
		ids = append(ids, id)
		return nil
	})
	return ids, err
}
