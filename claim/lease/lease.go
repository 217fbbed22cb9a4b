// Package lease is the claim form that writes a lease into locked_until.
//
// One statement takes up to one row per free worker whose lease is free and
// writes now+lease into each; the value written is the claim's fencing
// token, so an ack, retry or extension changes the row only while that
// value still stands. No connection is held while a handler runs, and a row
// whose holder died comes back when its lease runs out. It serves SQLite and
// Postgres.
package lease

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/claim"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// Form is the lease form.
var Form claim.Form = form{}

type form struct{}

func (form) Name() string                    { return "lease" }
func (form) Supports(*dialect.Dialect) error { return nil }
func (form) New(env claim.Env) (claim.Claimer, error) {
	if env.Lease <= 0 {
		return nil, fmt.Errorf("lease form on %q: lease must be positive, got %v", env.Table.Unquoted, env.Lease)
	}
	if env.Stmts == nil {
		env.Stmts = dialect.PlainStmts(env.DB)
	}
	c := &claimer{env: env}
	c.acks = newAcker(c)
	return c, nil
}

type claimer struct {
	env  claim.Env
	acks *acker

	mark  claim.Mark // where the next claim starts (see claim.Mark)
	lanes lanes      // the blocks of ids of its claims under a backlog
	trip  roundTrip  // the database's round trip, where claims run side by side
}

func (c *claimer) Traits() claim.Traits {
	return claim.Traits{HoldExpires: true, ClaimLimit: dialect.MaxClaim, ConcurrentWriters: c.env.Dialect.ConcurrentWriters(), SideBySide: true}
}

func (c *claimer) Held() int { return 0 }

// Floor is where the next claim after a short one starts (engine.Floorer).
func (c *claimer) Floor() int64 { return c.mark.Floor() }

// RoundTrip is the database's round trip as last measured
// (engine.RoundTripper); zero where the database takes one writer.
func (c *claimer) RoundTrip() time.Duration { return c.trip.RoundTrip() }

func (c *claimer) Claim(ctx context.Context, max int) ([]*claim.Job, error) {
	e := &c.env
	if e.Budget != nil {
		if err := e.Budget.Acquire(ctx); err != nil {
			return nil, err
		}
		defer e.Budget.Release()
	}
	max = min(max, dialect.MaxClaim) // the Postgres claim's locking limit
	if e.Dialect.ConcurrentWriters() {
		if measured := c.trip.maybe(ctx, e.DB); measured != nil {
			defer func() { <-measured }()
		}
	}
	// The turn to write is held until the rows are read: SQLite commits the
	// claim then.
	if err := e.Writer.Lock(ctx); err != nil {
		return nil, fmt.Errorf("claim from %q: %w", e.Table.Unquoted, err)
	}
	defer e.Writer.Unlock()
	now := e.Clock.Now()
	if err := c.readFloor(ctx, now); err != nil {
		return nil, err
	}
	from, marked := c.mark.Resume(now, e.Rescan)
	var jobs []*claim.Job
	var err error
	b := c.lanes.take()
	defer c.lanes.put(b)
	switch {
	case b.on && b.hi > b.lo && (!marked || b.behind > 0):
		jobs, err = c.claimBehind(ctx, b, now, max, from, !marked)
	case b.on && marked:
		jobs, err = c.claimBlocks(ctx, b, now, max)
	default:
		jobs, err = c.claim(ctx, now, max, from)
		b.after(c.blocksAllowed(b, now), err == nil && len(jobs) == max, jobs)
	}
	if err != nil && len(jobs) == 0 {
		return nil, err
	}
	if e.History != nil {
		for _, j := range jobs {
			j.Settler.(*settler).claimed = now
		}
	}
	c.acks.claimed(len(jobs))
	c.mark.Claimed(err == nil && len(jobs) == max, jobs)
	return jobs, err
}

// run sends one claim statement and reads the rows it took.
func (c *claimer) run(ctx context.Context, max int, q dialect.Call) ([]*claim.Job, error) {
	e := &c.env
	if e.SQL.ClaimThen.SQL() != "" {
		return c.runThen(ctx, max, q)
	}
	rows, err := e.Stmts.QueryContext(ctx, q.SQL, q.Args...)
	if err != nil {
		return nil, fmt.Errorf("claim from %q: %w", e.Table.Unquoted, err)
	}
	defer rows.Close()
	return c.scan(rows, max)
}

// runThen claims where the database has no UPDATE ... RETURNING (MySQL):
// the claim's select locks the rows and reads them as the claim leaves
// them, and ClaimThen writes the lease into them, in one READ COMMITTED
// transaction (see dialect.ClaimThenSQL).
func (c *claimer) runThen(ctx context.Context, max int, q dialect.Call) ([]*claim.Job, error) {
	// A claim that met a deadlock wrote nothing: it is run again, a few
	// times, before it is reported.
	for try := 1; ; try++ {
		jobs, err := c.claimTx(ctx, max, q)
		if err == nil || try == conflictTries || !c.env.Dialect.Conflict(err) {
			return jobs, err
		}
	}
}

// conflictTries is how many times a claim or a settlement that met a
// deadlock (MySQL: 1213, or a lock wait timeout, 1205) is run.
const conflictTries = 3

// claimTx is one transaction of runThen.
func (c *claimer) claimTx(ctx context.Context, max int, q dialect.Call) ([]*claim.Job, error) {
	e := &c.env
	fail := func(err error) error { return fmt.Errorf("claim from %q: %w", e.Table.Unquoted, err) }
	tx, err := e.DB.BeginTx(ctx, e.Dialect.HoldTx())
	if err != nil {
		return nil, fail(err)
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, q.SQL, q.Args...)
	if err != nil {
		return nil, fail(err)
	}
	jobs, err := c.scan(rows, max)
	rows.Close()
	if err != nil || len(jobs) == 0 {
		return nil, err
	}
	ids := make([]int64, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	then := e.SQL.ClaimThen.Call(jobs[0].Lease, ids)
	if _, err := tx.ExecContext(ctx, then.SQL, then.Args...); err != nil {
		return nil, fail(err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fail(err)
	}
	return jobs, nil
}

// scan reads the rows a claim took.
func (c *claimer) scan(rows *sql.Rows, max int) ([]*claim.Job, error) {
	e := &c.env
	jobs := make([]*claim.Job, 0, max)
	scan := claim.NewScanner(e.Table, max)
	settlers := make([]settler, 0, max) // one slab a claim
	for rows.Next() {
		j, err := scan.Scan(rows.Scan)
		if err != nil {
			return nil, err
		}
		settlers = append(settlers, settler{c: c, id: j.ID, lease: j.Lease})
		j.Settler = &settlers[len(settlers)-1]
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claim from %q: %w", e.Table.Unquoted, err)
	}
	return jobs, nil
}

// Adopt makes the job of a row leased outside a claim (claim.Adopter): a
// step published After the handled row, leased in the handler's
// transaction.
func (c *claimer) Adopt(scan func(dest ...any) error) (*claim.Job, error) {
	j, err := claim.ScanJob(c.env.Table, scan)
	if err != nil {
		return nil, err
	}
	s := &settler{c: c, id: j.ID, lease: j.Lease}
	if c.env.History != nil {
		s.claimed = c.env.Clock.Now()
	}
	j.Settler = s
	return j, nil
}

// Adopted counts adopted jobs in work: their acks are waited for.
func (c *claimer) Adopted(jobs []*claim.Job) { c.acks.claimed(len(jobs)) }

// readFloor reads where the table's live rows begin when the mark asks for
// it (see claim.Mark), on Postgres only: elsewhere the mark's floor stays
// at the table's start.
func (c *claimer) readFloor(ctx context.Context, now time.Time) error {
	e := &c.env
	if e.SQL.Floor.SQL() == "" {
		return nil
	}
	from, due := c.mark.FloorDue(now, e.Rescan)
	if !due {
		return nil
	}
	var least sql.NullInt64
	q := e.SQL.Floor.Call(from, e.Group)
	if err := e.DB.QueryRowContext(ctx, q.SQL, q.Args...).Scan(&least); err != nil {
		return fmt.Errorf("claim from %q: read where its rows begin: %w", e.Table.Unquoted, err)
	}
	c.mark.SetFloor(now, from, least)
	return nil
}

// settler settles one claimed row, fenced on its lease.
type settler struct {
	c     *claimer
	id    int64
	lease time.Time // as the claim (or the last extension) wrote it
	// claimed is when the claim took the row, for the history's duration
	// (set only where the subscription keeps a history).
	claimed time.Time
	// mu guards lease and inTx while a transactional handler may ack the
	// row (AckTx) beside an extension.
	mu   sync.Mutex
	inTx bool // acked inside the handler's transaction (see AckTx)
}

// exec runs a fenced statement and reports ErrLost when it changed nothing.
func (s *settler) exec(ctx context.Context, what string, q dialect.Call) error {
	return execFenced(ctx, &s.c.env, what, s.id, q)
}

func execFenced(ctx context.Context, e *claim.Env, what string, id int64, q dialect.Call) error {
	if err := e.Writer.Lock(ctx); err != nil {
		return fmt.Errorf("%s row %d of %q: %w", what, id, e.Table.Unquoted, err)
	}
	var res sql.Result
	var err error
	// A statement the database rolled back for a deadlock changed nothing:
	// it is sent again (see conflictTries).
	for try := 1; ; try++ {
		res, err = e.Stmts.ExecContext(ctx, q.SQL, q.Args...)
		if err == nil || try == conflictTries || !e.Dialect.Conflict(err) {
			break
		}
	}
	e.Writer.Unlock()
	if err != nil {
		return fmt.Errorf("%s row %d of %q: %w", what, id, e.Table.Unquoted, err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		return fmt.Errorf("%s row %d of %q: %w", what, id, e.Table.Unquoted, claim.ErrLost)
	}
	return nil
}

// Ack deletes the row if its lease still stands; acks that arrive together
// share one statement (see acker).
func (s *settler) Ack(ctx context.Context) error {
	if s.ackedInTx() {
		return nil
	}
	return s.c.acks.ack(ctx, s.fenced())
}

// fenced is the row's ack: its lease, and its duration where the
// subscription keeps a history.
func (s *settler) fenced() dialect.Fenced {
	f := dialect.Fenced{ID: s.id, Lease: s.lease}
	if s.c.env.History != nil {
		f.Took = s.c.env.Clock.Now().Sub(s.claimed)
	}
	return f
}

// AckAsync queues the ack and returns; done gets its result once its
// statement has run (see claim.AsyncAcker).
func (s *settler) AckAsync(done func(error)) {
	if s.ackedInTx() {
		done(nil)
		return
	}
	s.c.acks.commit.Submit(s.fenced(), done)
}

func (s *settler) Retry(ctx context.Context, delay time.Duration, lastError string) error {
	defer s.c.acks.settled()
	e := &s.c.env
	return s.exec(ctx, "retry", e.SQL.Retry.Call(s.id, s.lease, e.Clock.Now(), delay, lastError))
}

func (s *settler) Park(ctx context.Context, lastError string) error {
	defer s.c.acks.settled()
	e := &s.c.env
	return s.exec(ctx, "park", e.SQL.Park.Call(s.id, s.lease, lastError))
}

func (s *settler) Snooze(ctx context.Context, delay time.Duration) error {
	defer s.c.acks.settled()
	e := &s.c.env
	return s.exec(ctx, "snooze", e.SQL.Snooze.Call(s.id, s.lease, e.Clock.Now(), delay))
}

// Forget stops counting a job whose lease was lost among those in work,
// so the acks of the others do not wait for it.
func (s *settler) Forget() { s.c.acks.settled() }

// Release gives the row back, available at once: the next claim starts at
// the floor, as the row may lie behind the mark (claim.Mark.Released).
func (s *settler) Release(ctx context.Context) error {
	defer s.c.acks.settled()
	err := s.exec(ctx, "release", s.c.env.SQL.Release.Call(s.id, s.lease))
	if err == nil {
		s.c.mark.Released()
	}
	return err
}

func (s *settler) Extend(ctx context.Context, lease time.Duration) error {
	e := &s.c.env
	s.mu.Lock()
	inTx, fence := s.inTx, s.lease
	s.mu.Unlock()
	if inTx {
		return nil // the handler's transaction is deleting the row
	}
	raw, err := extend(ctx, e, s.id, e.SQL.Extend.Call(s.id, fence, e.Clock.Now(), lease))
	if err == sql.ErrNoRows {
		return fmt.Errorf("extend row %d of %q: %w", s.id, e.Table.Unquoted, claim.ErrLost)
	}
	if err != nil {
		return fmt.Errorf("extend row %d of %q: %w", s.id, e.Table.Unquoted, err)
	}
	at, _, err := e.Table.Times.Decode(raw)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.lease = at
	s.mu.Unlock()
	return nil
}

// extend runs an extension and returns the lease it wrote, or
// sql.ErrNoRows when the row's lease was not the one it was fenced on.
// Where the statement returns nothing (MySQL) the lease is read back once
// the row changed: only its holder moves it meanwhile.
func extend(ctx context.Context, e *claim.Env, id int64, q dialect.Call) (any, error) {
	if e.SQL.Extend.Returns() {
		return queryOne(ctx, e, q)
	}
	res, err := e.Stmts.ExecContext(ctx, q.SQL, q.Args...)
	if err != nil {
		return nil, err
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		return nil, sql.ErrNoRows
	}
	return queryOne(ctx, e, e.SQL.Extend.Read(id))
}

// queryOne returns the one column of the first row query returns, or
// sql.ErrNoRows.
func queryOne(ctx context.Context, e *claim.Env, q dialect.Call) (any, error) {
	if err := e.Writer.Lock(ctx); err != nil {
		return nil, err
	}
	defer e.Writer.Unlock()
	rows, err := e.Stmts.QueryContext(ctx, q.SQL, q.Args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return nil, err
		}
		return nil, sql.ErrNoRows
	}
	var v any
	if err := rows.Scan(&v); err != nil {
		return nil, err
	}
	return v, rows.Close()
}
