package advisory

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlinbox/sqlinbox/internal/claim"
	"github.com/sqlinbox/sqlinbox/internal/claim/contract"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/internal/groupcommit"
)

// pin is one claim's connection, shared by its jobs until the last is
// settled. Settlements group-commit on it (see groupcommit): one flush
// runs every settlement queued while the previous one ran, and the acks
// among them share one delete, so jobs of one claim finishing together pay
// one commit, not one each.
type pin struct {
	c      *claimer
	conn   *sql.Conn
	watch  *claim.ConnWatch // read while no flush runs
	commit *groupcommit.Committer[settlement]

	mu    sync.Mutex
	refs  int  // jobs not yet settled
	dirty bool // a lock may be left on the session: it must end
}

func newPin(c *claimer, conn *sql.Conn) *pin {
	p := &pin{c: c, conn: conn, watch: claim.NewConnWatch(conn)}
	// The watch reads the connection again once no settlement is queued;
	// Rest runs under the committer's lock, so the next flush pauses it.
	p.commit = groupcommit.New(groupcommit.Config[settlement]{Flush: p.flush, Rest: p.watch.Start})
	return p
}

// settlement is one job's settlement, queued on its pin.
type settlement struct {
	h    *held
	what string       // "ack", "retry", "park", "snooze", "release"
	call dialect.Call // the statement before the unlock; none for a release
}

// close gives the connection back to the pool, or ends it when a lock may
// be left on it, and uncounts it.
func (p *pin) close() {
	if p.watch != nil {
		p.watch.End()
	}
	if p.dirty {
		// First ask the session to drop every advisory lock it holds; a
		// pool that keeps sessions alive behind database/sql (a broker on a
		// *pgxpool.Pool) would otherwise get the session back with its locks.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := p.conn.ExecContext(ctx, p.c.env.SQL.UnlockAll.Call().SQL)
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
	inTx bool // deleted by the handler's transaction (tx.go); guarded by p.mu
	// claimed is when the claim took the row, for the history's duration
	// (set only where the subscription keeps a history).
	claimed time.Time
}

// moved is the row on its way into the history.
func (h *held) moved() dialect.Fenced {
	return dialect.Fenced{ID: h.id, Took: h.p.c.env.Clock.Now().Sub(h.claimed)}
}

// settle queues the job's settlement on its pin and waits for it: one
// statement on the row (none for a release), then the unlock on the same
// session. A failed statement still unlocks, so the row is free at once and
// the settlement changed nothing: that is claim.ErrLost.
func (h *held) settle(ctx context.Context, what string, q dialect.Call) error {
	p := h.p
	p.mu.Lock()
	if h.done {
		p.mu.Unlock()
		return fmt.Errorf("%s row %d of %q (advisory): already settled", what, h.id, p.c.env.Table.Unquoted)
	}
	h.done = true
	p.mu.Unlock()
	err := p.commit.Do(ctx, settlement{h: h, what: what, call: q})
	if err != nil && err == ctx.Err() {
		// The settlement still runs in its flush; its caller stops waiting.
		return fmt.Errorf("%s row %d of %q (advisory): %w", what, h.id, p.c.env.Table.Unquoted, err)
	}
	return err
}

// flush runs the settlements queued on the pin: each but the acks with its
// unlock, then the acks in one delete and one unlock. The last flush of the
// pin gives the connection back before its callers learn their outcome, so
// a caller that returns from the last settlement finds it uncounted.
func (p *pin) flush(batch []settlement, errs []error) {
	p.watch.Pause()
	// A flush settles every job queued on the pin, not only one caller's,
	// so no caller's context may cut it short.
	ctx, cancel := context.WithTimeout(context.Background(), contract.SettleTimeout)
	dirty := false
	var acks []int // indexes in batch
	for i := range batch {
		if batch[i].what == "ack" {
			acks = append(acks, i)
			continue
		}
		var d bool
		d, errs[i] = p.exec(ctx, &batch[i])
		dirty = dirty || d
	}
	if len(acks) > 0 {
		dirty = p.execAcks(ctx, batch, errs, acks) || dirty
	}
	cancel()
	p.mu.Lock()
	p.dirty = p.dirty || dirty
	p.refs -= len(batch)
	last := p.refs == 0
	p.mu.Unlock()
	if last {
		p.close()
	}
}

// execAcks deletes the acked rows and unlocks them, setting each ack's
// error. It reports whether the session may still hold a lock of them.
func (p *pin) execAcks(ctx context.Context, batch []settlement, errs []error, acks []int) (dirty bool) {
	e := &p.c.env
	ids := make([]int64, len(acks))
	var moved []dialect.Fenced
	for k, i := range acks {
		ids[k] = batch[i].h.id
		if e.History != nil {
			moved = append(moved, batch[i].h.moved())
		}
	}
	deleted, err, uerr := p.ackMany(ctx, ids, moved)
	for _, i := range acks {
		s := &batch[i]
		switch {
		case err != nil:
			errs[i] = outcome(e, s, err)
		case !deleted[s.h.id]:
			errs[i] = outcome(e, s, claim.ErrLost) // deleted by someone who ignores the lock
		case uerr != nil:
			errs[i] = outcome(e, s, fmt.Errorf("unlock: %w", uerr))
		}
	}
	return uerr != nil
}

// exec runs one settlement but an ack, and its unlock. It reports whether
// the session may still hold the row's lock, and the settlement's error.
func (p *pin) exec(ctx context.Context, s *settlement) (dirty bool, err error) {
	e := &p.c.env
	if s.call.SQL != "" {
		var res sql.Result
		// A statement the database rolled back for a conflict (MariaDB's
		// deadlock or lock wait timeout) changed nothing: it is sent again.
		for try := 1; ; try++ {
			res, err = p.conn.ExecContext(ctx, s.call.SQL, s.call.Args...)
			if err == nil || try == conflictTries || !e.Dialect.Conflict(err) {
				break
			}
		}
		if err == nil {
			if n, rerr := res.RowsAffected(); rerr == nil && n == 0 {
				err = claim.ErrLost // deleted by someone who ignores the lock
			}
		}
	}
	u := e.SQL.Unlock.Call(p.c.class, []int64{s.h.id})
	if _, uerr := p.conn.ExecContext(ctx, u.SQL, u.Args...); uerr != nil {
		dirty = true
		if err == nil {
			err = fmt.Errorf("unlock: %w", uerr)
		}
	}
	if err != nil {
		return dirty, outcome(e, s, err)
	}
	return dirty, nil
}

// outcome words a failed settlement for its caller.
func outcome(e *claim.Env, s *settlement, err error) error {
	switch {
	case err == claim.ErrLost, s.call.SQL == "":
		return fmt.Errorf("%s row %d of %q (advisory): %w", s.what, s.h.id, e.Table.Unquoted, err)
	default:
		return fmt.Errorf("%s row %d of %q (advisory): %w: %w", s.what, s.h.id, e.Table.Unquoted, claim.ErrLost, err)
	}
}

// errNoPipeline: the pool's driver is not pgx, so the connection cannot
// pipeline.
var errNoPipeline = errors.New("advisory: the connection is not a pgx connection")

// ackMany deletes the rows and returns the ids it deleted, then unlocks
// every row it was given. The unlock runs only after the delete has
// committed: unlocked first, a row deleted but not yet committed could be
// locked by another session and still read there as available, and handled
// twice. On a pgx connection the two go in one round trip, a pipeline with
// a Sync between them: the server commits the delete at that Sync, before
// it reads the unlock. err is the delete's failure (it rolled back; the
// rows are unlocked unchanged); uerr the unlock's (the session may keep
// locks: it must end).
//
// With a history (moved, the rows with their durations), the rows are moved
// into it rather than deleted.
func (p *pin) ackMany(ctx context.Context, ids []int64, moved []dialect.Fenced) (deleted map[int64]bool, err, uerr error) {
	e := &p.c.env
	rerr := p.conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return errNoPipeline
		}
		del := dialect.Call{SQL: e.SQL.DeleteMany.SQL(), Args: []any{idArray(ids)}}
		if e.History != nil {
			del = e.History.SQL.MoveLocked.Call(moved, e.Clock.Now(), e.History.Instance)[0]
		}
		deleted, err, uerr = pipelineAck(ctx, sc.Conn().PgConn(), del, e.SQL.Unlock.SQL(), p.c.class, ids)
		return nil
	})
	if !errors.Is(rerr, errNoPipeline) {
		if rerr != nil && err == nil {
			err, uerr = rerr, rerr
		}
		return deleted, err, uerr
	}
	deleted = make(map[int64]bool, len(ids))
	for try := 1; ; try++ {
		clear(deleted)
		if e.History != nil {
			var m map[int64]bool
			m, err = e.History.Move(ctx, p.conn, p.begin, moved, false, e.Clock.Now())
			maps.Copy(deleted, m)
		} else {
			err = p.deleteMany(ctx, ids, deleted)
		}
		if err == nil || try == conflictTries || !e.Dialect.Conflict(err) {
			break
		}
	}
	u := e.SQL.Unlock.Call(p.c.class, ids)
	_, uerr = p.conn.ExecContext(ctx, u.SQL, u.Args...)
	return deleted, err, uerr
}

// conflictTries is how many times a settlement's statement that the
// database rolled back for a conflict (MariaDB: a deadlock, 1213, or a
// lock wait timeout, 1205) is sent.
const conflictTries = 3

// begin opens a transaction on the pin's connection.
func (p *pin) begin(ctx context.Context) (*sql.Tx, error) {
	return p.conn.BeginTx(ctx, p.c.env.Dialect.HoldTx())
}

// deleteMany deletes rows ids and marks in deleted those it deleted.
func (p *pin) deleteMany(ctx context.Context, ids []int64, deleted map[int64]bool) error {
	return claim.ReadIDs(ctx, p.conn, p.c.env.SQL.DeleteMany.Call(ids), deleted)
}

// pipelineAck sends DeleteMany, a Sync, Unlock and a Sync in one round
// trip. Each Sync ends an implicit transaction: the delete commits, its WAL
// flushed, before the server reads the unlock; a failed delete rolls back
// at its Sync and the unlock still runs.
func pipelineAck(ctx context.Context, pc *pgconn.PgConn, del dialect.Call, unlock string, class int32, ids []int64) (deleted map[int64]bool, err, uerr error) {
	arr := idArray(ids)
	pl := pc.StartPipeline(ctx)
	pl.SendQueryParams(del.SQL, textParams(del.Args), nil, nil, nil)
	pl.SendPipelineSync()
	pl.SendQueryParams(unlock, [][]byte{[]byte(strconv.Itoa(int(class))), arr}, nil, nil, nil)
	if err := pl.Sync(); err != nil {
		pl.Close()
		return nil, err, err
	}
	deleted = make(map[int64]bool, len(ids))
	err = readRows(pl, func(v []byte) error {
		id, perr := strconv.ParseInt(string(v), 10, 64)
		deleted[id] = true
		return perr
	})
	var pgErr *pgconn.PgError
	if err != nil && !errors.As(err, &pgErr) {
		// The connection itself failed: nothing more can be read.
		pl.Close()
		return deleted, err, err
	}
	if serr := readSync(pl); serr != nil {
		pl.Close()
		return deleted, orErr(err, serr), serr
	}
	uerr = readRows(pl, func([]byte) error { return nil })
	if serr := readSync(pl); serr != nil && uerr == nil {
		uerr = serr
	}
	if cerr := pl.Close(); cerr != nil && uerr == nil {
		uerr = cerr
	}
	return deleted, err, uerr
}

// textParams writes a statement's arguments in Postgres's text format:
// those of DeleteMany and of a move into the history (bytes, text, times).
func textParams(args []any) [][]byte {
	out := make([][]byte, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case []byte:
			out[i] = v
		case string:
			out[i] = []byte(v)
		case time.Time:
			out[i] = v.UTC().AppendFormat(nil, "2006-01-02 15:04:05.999999Z07:00")
		default:
			out[i] = fmt.Append(nil, v)
		}
	}
	return out
}

// readRows reads the next result of the pipeline and passes the first
// column of each row to row.
func readRows(pl *pgconn.Pipeline, row func([]byte) error) error {
	res, err := pl.GetResults()
	if err != nil {
		return err
	}
	rr, ok := res.(*pgconn.ResultReader)
	if !ok {
		return fmt.Errorf("advisory: pipeline returned %T, want a result", res)
	}
	var rowErr error
	for rr.NextRow() {
		if err := row(rr.Values()[0]); err != nil && rowErr == nil {
			rowErr = err
		}
	}
	if _, err := rr.Close(); err != nil {
		return err
	}
	return rowErr
}

func readSync(pl *pgconn.Pipeline) error {
	res, err := pl.GetResults()
	if err != nil {
		return err
	}
	if _, ok := res.(*pgconn.PipelineSync); !ok {
		return fmt.Errorf("advisory: pipeline returned %T, want its sync", res)
	}
	return nil
}

// idArray is ids in Postgres's text form of an array: {1,2,3}.
func idArray(ids []int64) []byte {
	var b strings.Builder
	b.WriteByte('{')
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(id, 10))
	}
	b.WriteByte('}')
	return []byte(b.String())
}

func orErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// Ack deletes the row, then unlocks it once the delete has committed.
func (h *held) Ack(ctx context.Context) error {
	if h.ackedInTx() {
		return h.settle(ctx, "unlock", dialect.Call{})
	}
	return h.settle(ctx, "ack", h.p.c.env.SQL.Delete.Call(h.id))
}

// Retry sets the row's time to now+delay, counts the attempt, and unlocks.
func (h *held) Retry(ctx context.Context, delay time.Duration, lastError string) error {
	e := &h.p.c.env
	return h.settle(ctx, "retry", e.SQL.RetryLocked.Call(h.id, e.Clock.Now(), delay, lastError))
}

// Park sets the row aside for good, and unlocks.
func (h *held) Park(ctx context.Context, lastError string) error {
	e := &h.p.c.env
	return h.settle(ctx, "park", e.SQL.ParkLocked.Call(h.id, lastError))
}

// Snooze sets the row's time to now+delay, gives its attempt back, and
// unlocks.
func (h *held) Snooze(ctx context.Context, delay time.Duration) error {
	e := &h.p.c.env
	return h.settle(ctx, "snooze", e.SQL.SnoozeLocked.Call(h.id, e.Clock.Now(), delay))
}

// Release gives the row's attempt back and unlocks it.
func (h *held) Release(ctx context.Context) error {
	if h.p.c.env.Table.Attempts != "" {
		return h.settle(ctx, "release", h.p.c.env.SQL.ReleaseLocked.Call(h.id))
	}
	return h.settle(ctx, "release", dialect.Call{})
}

// Hold ends when the claim's session is seen to end.
func (h *held) Hold() context.Context { return h.p.watch.Hold() }

// Forget gives up a job whose hold was lost: it will never be settled, and
// the session, which may hold its lock, is ended with the last job.
func (h *held) Forget() {
	p := h.p
	p.mu.Lock()
	if h.done {
		p.mu.Unlock()
		return
	}
	h.done = true
	p.dirty = true
	p.refs--
	// Every other job's settlement has run its statements (a flush counts
	// its jobs settled after them): the connection is idle.
	last := p.refs == 0
	p.mu.Unlock()
	if last {
		p.close()
	}
}

// Extend does nothing: an advisory lock lasts as long as its session.
func (h *held) Extend(context.Context, time.Duration) error { return nil }
