package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/claim/contract"
	"github.com/sqlinbox/sqlinbox/internal/inboxtype"
)

// claimBatch is the most rows a claim takes under a backlog, on Postgres,
// in a form whose claim takes a row for every free worker, while its round
// trip is short: the rows beyond the free workers wait in the process
// (spare) and workers take them before the next claim. A process of few
// workers then pays a claim's commit per claimBatch rows, as a large one
// does, not one per few rows.
const claimBatch = 100

// spareFactor bounds a claim's rows to this many a worker while its round
// trip is short, so the rows (and payloads) a process holds still follow
// its workers, not the backlog.
const spareFactor = 4

// farFactor bounds them where the round trip is long: a claim then has to
// bring the rows its workers handle until the next one is back, and at four
// a worker a subscription of 100 waited on its claims at 1 ms and beyond.
const farFactor = 10

// maxBatch bounds a claim's rows however long its round trip (the lease
// claim's own bound is the same, dialect.MaxClaim).
const maxBatch = 1000

// batchRows is the most rows a claim of a subscription of n workers takes
// in all under a backlog, spare rows included, when its workers handle
// trip rows during a claim's round trip: claimBatch (within spareFactor a
// worker), or twice trip where the database is far, so the rows a claim
// brings last through the next claim's round trip (sent when they run low:
// prefetch), within farFactor a worker and maxBatch.
func batchRows(n int, trip float64) int {
	near := min(spareFactor*n, claimBatch)
	far := min(farFactor*n, maxBatch, int(2*trip))
	return max(near, far)
}

// spareWait bounds how long spare rows wait for a worker: a claim takes no
// more spare rows than its workers handled in spareWait (at the rate last
// measured), nor in a tenth of the lease; so a slow handler gets few or
// none, and a queued row's lease (counted from its claim) is far from its
// end when it starts.
const spareWait = 250 * time.Millisecond

// rateSpan is the least time the handling rate is measured over; where a
// claim's round trip is longer, the rate is measured over two of them, as
// rows then come in bursts a round trip apart.
const rateSpan = 10 * time.Millisecond

// spare is the rows a claim took beyond its free workers, oldest first.
// Workers take from it as they finish a job; the loop hands them to workers
// it counts free, and gives them all back at the stop.
type spare struct {
	mu     sync.Mutex
	q      []task
	head   int
	closed bool            // the loop stopped: no spare row starts any more
	done   <-chan struct{} // Run's ctx's: none starts after it either
	// low is the count of rows left at which a worker that takes one tells
	// the loop, which may send a claim ahead (prefetch); -1: never.
	low atomic.Int64
}

// push queues rows a claim sent at at took beyond its free workers. The
// loop sorted them by id: an update's rows come back in no set order, and
// spare rows start one after the other.
func (s *spare) push(jobs []*contract.Job, at time.Time) {
	s.mu.Lock()
	s.add(jobs, at)
	s.mu.Unlock()
}

// adopt queues adopted rows (Engine.Adopt) unless no spare row may start
// any more (shut): then it queues nothing and says so.
func (s *spare) adopt(jobs []*contract.Job, at time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shut() {
		return false
	}
	s.add(jobs, at)
	return true
}

// add queues jobs; s.mu is held.
func (s *spare) add(jobs []*contract.Job, at time.Time) {
	for _, j := range jobs {
		s.q = append(s.q, task{j: j, at: at})
	}
}

// shut says no spare row starts any more: the loop stopped, or Run's ctx
// ended (the loop's stop gives back what waits); s.mu is held.
func (s *spare) shut() bool {
	if s.closed {
		return true
	}
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// len is how many rows wait.
func (s *spare) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.q) - s.head
}

// take removes the oldest row, if any, and says how many are left; false
// when none was taken (none waits, or Run's ctx has ended).
func (s *spare) take() (task, int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.head == len(s.q) || s.shut() {
		return task{}, 0, false
	}
	t := s.q[s.head]
	s.q[s.head] = task{}
	s.head++
	if s.head == len(s.q) {
		s.q, s.head = s.q[:0], 0
	}
	return t, len(s.q) - s.head, true
}

// close empties the queue for good and returns what it held.
func (s *spare) close() []task {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	ts := append([]task(nil), s.q[s.head:]...)
	clear(s.q)
	s.q, s.head = nil, 0
	return ts
}

// pop takes the oldest spare row that may start now, and returns beside it
// the rows before it that may not (see startable). The caller settles those
// (putBack) once its own finished job is settled, so their statements never
// hold up that job's ack.
func (w *workers) pop() (next task, skipped []task, ok bool) {
	for {
		t, left, ok := w.spare.take()
		if !ok {
			return task{}, skipped, false
		}
		if int64(left) == w.spare.low.Load() {
			signal(w.changed) // the loop may claim ahead (prefetch)
		}
		if w.e.startable(t) {
			return t, skipped, true
		}
		skipped = append(skipped, t)
	}
}

// startable reports whether a spare row may start: its hold is not lost,
// its queue is not paused, and its lease is not near its end (a third of
// it left: its extension would be due).
func (e *Engine) startable(t task) bool {
	if h, ok := t.j.Settler.(contract.Holder); ok && h.Hold().Err() != nil {
		return false
	}
	if e.cfg.Paused != nil && e.cfg.Paused() {
		return false
	}
	return !e.late(t)
}

// late reports whether a spare row's lease is near its end.
func (e *Engine) late(t task) bool {
	return e.traits.HoldExpires && !t.j.Lease.IsZero() && !e.cfg.Clock.Now().Before(t.at.Add(e.every))
}

// putBack settles spare rows that may not start: told lost when the
// connection holding one ended, given back otherwise.
func (e *Engine) putBack(ts []task) {
	for _, t := range ts {
		j := t.j
		if h, ok := j.Settler.(contract.Holder); ok && h.Hold().Err() != nil {
			e.settleHandling(context.Background(), &handling{j: j, lost: true, ev: inboxtype.Event{Subscription: e.cfg.Name, ID: j.ID,
				Attempt: max(j.Attempts, 1), Start: e.cfg.Clock.Now(), Err: inboxtype.ErrHoldLost}})
			e.stats.lost.Add(1)
			continue
		}
		if e.late(t) {
			e.logger().Warn("inbox: a row claimed beyond the free workers waited for one until its lease neared its end; given back unstarted", "table", e.cfg.Table, "id", j.ID, "waited", e.cfg.Clock.Now().Sub(t.at))
		}
		e.release(context.Background(), j)
	}
}

// spares says whether the loop may claim beyond its free workers: the form
// takes a row for every free worker, where writers run side by side
// (SQLite has one writer: more rows a claim did not pay there).
func (l *loop) spares() bool {
	return l.e.traits.ConcurrentWriters && l.e.traits.RowsPerClaim == 0 && !l.e.cfg.Ordered &&
		(l.e.cfg.ClaimRows == 0 || l.e.cfg.ClaimRows > l.e.cfg.Workers)
}

// extra is how many rows beyond the free workers the next claim of k may
// take: none unless the last claim came back full (a backlog), up to
// claimBatch and spareFactor a worker in all, and no more than the workers
// handle in spareWait or a tenth of the lease at the rate measured; within
// Config.ClaimRows in all.
func (l *loop) extra(k int) int {
	if !l.spares() || !l.backlog {
		return 0
	}
	if m := l.e.cfg.ClaimRows; m > 0 {
		return max(min(l.spareRows(k), m-k), 0)
	}
	return l.spareRows(k)
}

// spareRows is extra before the bound of Config.ClaimRows.
func (l *loop) spareRows(k int) int {
	now, n := time.Now(), l.w.handled.Load()
	if d := now.Sub(l.rateAt); l.rateAt.IsZero() || d >= max(rateSpan, 2*l.trip) {
		if !l.rateAt.IsZero() {
			l.rate = float64(n-l.rateN) / d.Seconds()
		}
		l.rateAt, l.rateN = now, n
	}
	if l.starved && l.far() {
		// Every row was handled before the claim came back: the claims
		// bound the rate measured, and sized by it they grew from 100
		// rows over some ten round trips. The most a far claim takes.
		return max(l.e.limit(batchRows(l.e.cfg.Workers, maxBatch))-k, 0)
	}
	wait := min(spareWait, l.e.cfg.Lease/10)
	most := l.e.limit(batchRows(l.e.cfg.Workers, l.tripRows()))
	return max(min(int(l.rate*wait.Seconds()), most-k), 0)
}

// far says the database's own round trip is long (contract.FarRoundTrip).
func (l *loop) far() bool {
	return l.rt != nil && l.rt.RoundTrip() >= contract.FarRoundTrip
}

// tripRows is how many rows the workers handle during a claim's round
// trip, at the rate and the round trip last measured.
func (l *loop) tripRows() float64 { return l.rate * l.trip.Seconds() }

// farTrip is the least round trip of a claim at which the loop sends
// claims ahead (prefetch). On loopback a claim comes back within a
// millisecond, and a second claim beside the workers' own cost more CPU
// than its wait saved (90-108k against 115-128k jobs/s, measured when a
// second claim in flight was tried).
const farTrip = 2 * time.Millisecond

// farClaims is how many claims a subscription whose form keeps one in
// flight (RowsPerClaim zero) may have in flight where the database is far
// (farTrip) under a backlog, if its claims may run side by side
// (Traits.SideBySide): a claim of 1000 rows took 15-45 ms at 5 ms each way,
// and while it ran nothing else was claimed, so the workers waited on every
// claim (one claim in flight drained at most 1000 rows a round trip). A
// second goes out while the rows coming and waiting fall short of a round
// trip's worth (prefetch, claimMore), so the process holds at most two
// claims' rows beyond its workers.
const farClaims = 2

// RoundTripper is a Claimer that measures its database's round trip apart
// from the work of a claim (a ping): from contract.FarRoundTrip, a form of
// one claim in flight may have a second beside it (see farClaims).
type RoundTripper interface {
	RoundTrip() time.Duration
}

// claimsNow is how many claims the loop may have in flight now.
func (l *loop) claimsNow() int {
	if l.maxClaims == 1 && l.trip >= farTrip && l.backlog && l.e.traits.SideBySide && l.spares() && l.far() {
		return farClaims
	}
	return l.maxClaims
}

// prefetch sends a claim for spare rows alone while every worker is busy
// under a backlog, once the spare rows left and those the claims in flight
// bring would run out before a claim sent now came back (tripRows): where
// the database is far (farTrip), workers then find rows waiting instead of
// waiting a round trip for them. A claim of spare rows is made only where
// claims take them (spares).
func (l *loop) prefetch() {
	if l.trip < farTrip || l.stopping || l.idle || l.cooling || !l.backlog || l.free > 0 || l.inflight >= l.claimsNow() || !l.spares() ||
		l.inflight+l.e.cfg.Claimer.Held() >= l.e.cfg.Conns {
		return
	}
	left := l.w.spare.len()
	if left == 0 && l.inflight == 0 || float64(left+l.inRows) > l.tripRows() {
		return
	}
	if extra := l.extra(0); extra > 0 {
		l.send(0, extra)
	}
}

// armPrefetch tells the workers at how many spare rows left to signal the
// loop: those its round trip takes less those the claims in flight bring,
// where claims take spare rows.
func (l *loop) armPrefetch() {
	low := int64(-1)
	if rows := int64(l.tripRows()) - int64(l.inRows); rows > 0 && l.trip >= farTrip && l.spares() && l.backlog && l.inflight < l.claimsNow() {
		low = rows
	}
	l.w.spare.low.Store(low)
}

// startSpare hands spare rows to workers the loop counts free.
func (l *loop) startSpare() {
	for l.free > 0 {
		t, skipped, ok := l.w.pop()
		l.e.putBack(skipped)
		if !ok {
			return
		}
		l.free--
		l.w.dispatch(t)
	}
}

// releaseSpare gives back, at the stop, every spare row not started, all
// within the shutdown timeout: on a database that stalls, the rows not
// given back by then wait out their leases instead of holding up the stop.
func (l *loop) releaseSpare() {
	ts := l.w.spare.close()
	if len(ts) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.e.cfg.Shutdown)
	defer cancel()
	for i, t := range ts {
		if ctx.Err() != nil {
			l.e.logger().Warn("inbox: rows claimed beyond the free workers not given back within the shutdown timeout; they wait out their leases", "table", l.e.cfg.Table, "rows", len(ts)-i, "timeout", l.e.cfg.Shutdown)
			return
		}
		l.e.release(ctx, t.j)
	}
}
