package lease

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/claim"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// maxAckBatch bounds the rows one ack statement deletes.
const maxAckBatch = 1000

// ackLinger is the longest an ack waits for the acks of other jobs of its
// claimer still in work, so they share a statement. It paces statements,
// so it is host time. A claimer with no other job in work sends at once.
const ackLinger = time.Millisecond

// ackIdle is how long the acker's goroutine waits for more acks once it has
// sent all it had, before it ends. Under load the next acks come within a
// claim's round trip, and a goroutine started anew grows its stack through
// the driver again (stack copying was 6% of the process's CPU in a Postgres
// drain, with the claims' goroutines).
const ackIdle = 100 * time.Millisecond

// ackTimeout bounds one batched ack statement.
const ackTimeout = 30 * time.Second

// acker group-commits the acks of one claimer: an ack that arrives while a
// statement is in flight waits for the next, which deletes every ack queued
// meanwhile in one statement; and while other jobs of the claimer are still
// in work, the first ack waits up to ackLinger for theirs. A lone ack (no
// other job in work) is sent at once as the single-row ack; under load a
// commit (a WAL flush on Postgres, the writer's lock on SQLite) is paid per
// batch instead of per row. Each row is still fenced on the lease its claim
// wrote, and each caller learns whether its own row was deleted.
//
// SQLite, lease, 100k rows, 1x100: without the linger an ack statement
// carried 4 rows (24,500 statements), since a local statement is over
// before the next ack comes.
type acker struct {
	c *claimer

	mu      sync.Mutex
	pending []ackReq
	first   time.Time // when the oldest pending ack came
	inWork  int       // jobs claimed, not yet settled nor queued to ack
	running bool
	kick    chan struct{}
	timer   *time.Timer // the linger's and the idle wait's, kept by run
}

// claimed counts n more jobs in work.
func (a *acker) claimed(n int) {
	a.mu.Lock()
	a.inWork += n
	a.mu.Unlock()
}

// settled counts a job settled without an ack (retried, parked, released).
func (a *acker) settled() {
	a.mu.Lock()
	a.inWork = max(a.inWork-1, 0)
	wake := a.inWork == 0 && len(a.pending) > 0
	a.mu.Unlock()
	if wake {
		a.poke()
	}
}

func (a *acker) poke() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

type ackReq struct {
	id    int64
	lease time.Time   // the fence
	done  func(error) // called once with the ack's result, from run
}

func (a *acker) ack(ctx context.Context, id int64, lease time.Time) error {
	res := make(chan error, 1)
	a.queue(ackReq{id: id, lease: lease, done: func(err error) { res <- err }})
	select {
	case err := <-res:
		return err
	case <-ctx.Done():
		return fmt.Errorf("ack row %d of %q: %w", id, a.c.env.Table.Unquoted, ctx.Err())
	}
}

// queue adds an ack to the next statement.
func (a *acker) queue(req ackReq) {
	a.mu.Lock()
	if len(a.pending) == 0 {
		a.first = time.Now()
	}
	a.pending = append(a.pending, req)
	a.inWork = max(a.inWork-1, 0)
	// run is woken only where its wait changes: at a batch's first ack,
	// when no job of the claimer is left in work, and at a full batch;
	// the acks between join the batch without waking it (a wake an ack
	// cost the acker a timer reset and a goroutine switch a job).
	wake := len(a.pending) == 1 || a.inWork == 0 || len(a.pending) >= maxAckBatch
	if !a.running {
		a.running = true
		go a.run()
	}
	a.mu.Unlock()
	if wake {
		a.poke()
	}
}

// run sends batches until none has been queued for ackIdle, then ends: no
// goroutine is left behind by a claimer nobody uses any more.
func (a *acker) run() {
	var batch []ackReq
	if a.timer == nil {
		a.timer = time.NewTimer(time.Hour)
	}
	t := a.timer
	wait := func(d time.Duration) (kicked bool) {
		t.Reset(d)
		select {
		case <-a.kick:
			kicked = true
		case <-t.C:
		}
		t.Stop()
		return kicked
	}
	for {
		a.mu.Lock()
		for len(a.pending) > 0 && len(a.pending) < maxAckBatch && a.inWork > 0 {
			d := ackLinger - time.Since(a.first)
			if d <= 0 {
				break
			}
			a.mu.Unlock()
			wait(d)
			a.mu.Lock()
		}
		n := min(len(a.pending), maxAckBatch)
		if n == 0 {
			a.mu.Unlock()
			if wait(ackIdle) {
				continue
			}
			a.mu.Lock()
			if len(a.pending) > 0 {
				a.mu.Unlock()
				continue
			}
			a.running = false
			a.mu.Unlock()
			return
		}
		batch = append(batch[:0], a.pending[:n]...)
		rest := copy(a.pending, a.pending[n:])
		clear(a.pending[rest:])
		a.pending = a.pending[:rest]
		a.first = time.Now() // those left have waited a statement already
		a.mu.Unlock()
		a.flush(batch)
	}
}

func (a *acker) flush(batch []ackReq) {
	e := &a.c.env
	ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
	defer cancel()
	if len(batch) == 1 {
		r := batch[0]
		r.done(execFenced(ctx, e, "ack", e.SQL.Ack, r.id, r.id, e.Table.Times.Encode(r.lease)))
		return
	}
	var deleted map[int64]bool
	err := e.Writer.Lock(ctx)
	if err == nil {
		deleted, err = a.deleteMany(ctx, batch)
		e.Writer.Unlock()
	}
	for _, r := range batch {
		switch {
		case err != nil:
			r.done(fmt.Errorf("ack row %d of %q: %w", r.id, e.Table.Unquoted, err))
		case deleted[r.id]:
			r.done(nil)
		default:
			r.done(fmt.Errorf("ack row %d of %q: %w", r.id, e.Table.Unquoted, claim.ErrLost))
		}
	}
}

// deleteMany runs AckMany on the batch and returns the ids it deleted.
func (a *acker) deleteMany(ctx context.Context, batch []ackReq) (map[int64]bool, error) {
	e := &a.c.env
	var (
		rows *sql.Rows
		err  error
	)
	if e.Dialect.Kind == dialect.Postgres {
		// Two array literals, the leases in microseconds since the epoch:
		// written here in one buffer each, where the driver's arrays of
		// int64 and time.Time take an allocation or three per element
		// (see BENCHMARKS.md, "Changes").
		ids := make([]byte, 0, 2+len(batch)*20)
		fences := make([]byte, 0, 2+len(batch)*20)
		ids, fences = append(ids, '{'), append(fences, '{')
		for i, r := range batch {
			if i > 0 {
				ids, fences = append(ids, ','), append(fences, ',')
			}
			ids = strconv.AppendInt(ids, r.id, 10)
			fences = strconv.AppendInt(fences, r.lease.UnixMicro(), 10)
		}
		ids, fences = append(ids, '}'), append(fences, '}')
		rows, err = e.Stmts.QueryContext(ctx, e.SQL.AckMany, string(ids), string(fences))
	} else {
		pairs := make([][2]any, len(batch))
		for i, r := range batch {
			pairs[i] = [2]any{r.id, e.Table.Times.Encode(r.lease)}
		}
		var arg []byte
		arg, err = json.Marshal(pairs)
		if err != nil {
			return nil, err
		}
		rows, err = e.Stmts.QueryContext(ctx, e.SQL.AckMany, string(arg))
	}
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	deleted := make(map[int64]bool, len(batch))
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		deleted[id] = true
	}
	return deleted, rows.Err()
}
