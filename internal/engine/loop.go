package engine

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/internal/claim/contract"
)

// workerWait is the longest a claim for few workers waits for more.
const workerWait = time.Millisecond

// tripWeight is the weight of the last claim's round trip in the average
// (one in tripWeight).
const tripWeight = 4

// wakeCooldown is the least time between a claim that found nothing and
// the next claim a wake starts.
const wakeCooldown = 2 * time.Millisecond

// The backoff while the database fails, from MinFailWait doubling to
// MaxFailWait: of claims here (while the database is out of reach, to the
// poll interval at most), and of the statements package inbox sends until
// the database can be reached.
const (
	MinFailWait = 100 * time.Millisecond
	MaxFailWait = 30 * time.Second
)

// claimReq asks a claim goroutine for a claim.
type claimReq struct {
	ctx     context.Context
	asked   int
	workers int    // of asked, the rows for free workers; the rest are spare
	gen     uint64 // the wake generation when the claim was asked for
}

type claimResult struct {
	at      time.Time     // on the engine's clock, when the claim was sent
	took    time.Duration // host time, the claim's round trip
	asked   int
	workers int
	jobs    []*contract.Job
	err     error
	gen     uint64 // the wake generation when the claim started
}

// loop is the claim loop: it keeps claims in flight for free workers, and
// each event it waits on (a claim's result, a worker's signal, a wake, the
// poll, a cooldown's or a worker wait's end, the stop) is a method.
type loop struct {
	e *Engine
	w *workers

	// A form whose claim takes a row for every free worker (lease,
	// advisory) keeps one claim in flight: workers freed meanwhile join the
	// next claim, so a busy subscription claims in large batches and pays a
	// commit for many rows, not one a freed worker (a second goes out beside
	// it where the database is far: farClaims). A form that takes one row
	// a claim (row lock) keeps one in flight per free worker, within the
	// connection budget. SQLite has one writer: one claim in flight.
	maxClaims int
	free      int // workers without a job, less those asked for in flight
	inflight  int
	inRows    int // rows the claims in flight asked for
	settling  int
	idle      bool // waiting for a wake or the poll
	wakeGen   uint64

	failures, retriedAtOnce, backedOff int // failed claims in a row; of them, sent again at once; backed off
	lastErr                            string
	// One outage fails every claim in flight: only a failure of a claim
	// sent after the last one was seen, outside a backoff, steps the
	// backoff, so it doubles once per wait, not once per worker.
	backingOff bool
	failSeen   time.Time // on the engine's clock

	results chan claimResult
	claims  chan claimReq
	// Claims outlive Run's ctx so that rows a claim took at the stop are
	// known and given back; they are cancelled the shutdown timeout after it.
	// Their context lasts a busy spell: it ends once the loop is idle, as
	// the driver's calls leave bookkeeping in it (0.3 kB an idle
	// subscription kept for nothing).
	claimBase      context.Context
	claimCtx       context.Context // nil while idle
	cancelClaims   context.CancelFunc
	claimsDeadline *time.Timer
	stopping       bool
	ctxDone        <-chan struct{}

	poll      clock.Timer
	pollArmed bool
	pollDue   time.Time
	// With a poller, an idle loop parks there instead of arming its poll
	// (see Poller).
	parking parking
	parked  bool

	// A claim that found nothing holds the next wake-driven claim for
	// wakeCooldown (host time: it paces statements, not the table's time),
	// so a burst of wakes costs a few claims; a claim that found rows holds
	// nothing, so a steady trickle is picked up at once.
	lastShort time.Time
	cooling   bool
	coolTimer *time.Timer

	// In a form whose claim takes a row for every free worker, a claim for
	// fewer than half the workers, while the others are busy, waits up to
	// workerWait for more of them to free up: under a backlog claims stay
	// large, and a commit is paid per many rows. On Postgres, where each
	// claim's commit waits for a WAL flush, a claim under a backlog (the last
	// claim came back full) waits so for all the workers: larger claims pay
	// fewer flushes. SQLite commits without a flush, and waiting for all
	// there costs more than it saves. Host time too; a subscription with
	// every worker free claims at once, and after a short claim only half are
	// waited for, so a trickle is not held. A form of one row a claim never
	// waits, nor does a claim that takes spare rows (spare.go): its size does
	// not depend on the free workers.
	waitForAllWorkers bool
	backlog           bool
	waitedForWorkers  bool
	waitingForWorkers bool
	workerWaitTimer   *time.Timer

	// The handling rate last measured (jobs a second of host time), and
	// where its span began: it bounds the spare rows a claim takes.
	rate   float64
	rateAt time.Time
	rateN  int64
	// trip is a claim's round trip (host time), averaged over the last
	// few: with the rate, the rows a claim takes and when one is sent
	// ahead (prefetch).
	trip time.Duration
	rt   RoundTripper // the form's, if it measures the database's round trip
	// starved: the last claim came back full to workers with nothing in
	// work or waiting.
	starved bool
}

func newLoop(e *Engine, w *workers, ctx context.Context) *loop {
	l := &loop{e: e, w: w, maxClaims: 1, free: e.cfg.Workers, results: make(chan claimResult, e.cfg.Workers+1),
		claims: make(chan claimReq), ctxDone: ctx.Done(), waitForAllWorkers: e.traits.ConcurrentWriters}
	if e.traits.ConcurrentWriters && e.traits.RowsPerClaim != 0 {
		l.maxClaims = e.cfg.Conns
	}
	w.signalEach = e.traits.PinsConnection || l.maxClaims > 1
	l.rt, _ = e.cfg.Claimer.(RoundTripper)
	l.claimBase = context.WithoutCancel(ctx)
	if e.cfg.Poller != nil {
		l.parking = parking{group: e.cfg.Group, floor: floorOf(e.cfg.Claimer), due: make(chan struct{}, 1), idle: e.cfg.Idle}
	}
	l.rearm(e.cfg.Poll)
	return l
}

// run claims and dispatches until the stop, and until the claims in
// flight then have come back.
func (l *loop) run(ctx context.Context) {
	defer l.close()
	for {
		l.free += int(l.w.freed.Swap(0))
		l.settling = int(l.w.settling.Load())
		if l.backingOff && !l.e.outage.Load() {
			l.endBackoff() // a settlement succeeded
		}
		l.startSpare()
		l.claimMore()
		l.prefetch()
		if l.stopping && l.inflight == 0 {
			l.e.cfg.Idle.set(false, time.Time{}, nil, nil, nil)
			return
		}
		var pollC <-chan time.Time
		var pollAt time.Time
		var poller *Poller
		if l.pollArmed {
			pollC, pollAt = l.poll.C(), l.pollDue
		}
		// A blocked select holds a runtime record per channel it waits on
		// (96 B each, on the heap): an idle loop waits on no channel that
		// cannot deliver. Results come only for claims in flight.
		results, changed := l.results, l.w.changed
		if l.inflight == 0 {
			results = nil
		}
		if l.parked {
			poller = l.e.cfg.Poller
		}
		idle := l.idle && !l.stopping && l.inflight == 0 && l.free == l.e.cfg.Workers && l.settling == 0 && l.w.spare.len() == 0
		if idle {
			// Nothing is in work or settling: no signal has news.
			changed = nil
			l.endClaims()
		}
		l.e.cfg.Idle.set(idle, pollAt, poller, l.e.cfg.Wakes, l.parking.due)
		select {
		case r := <-results:
			l.onResult(ctx, r)
		case <-changed:
			// The counts are read at the top of the loop.
		case <-l.e.cfg.Wakes:
			l.onWake()
		case <-timerC(l.coolTimer):
			l.cooling = false
		case <-timerC(l.workerWaitTimer):
			l.waitingForWorkers, l.waitedForWorkers = false, true
		case <-pollC:
			l.onPoll()
		case <-l.parking.due:
			l.parked = false
			l.onPoll()
		case <-l.ctxDone:
			l.stop()
		}
	}
}

// close ends the claim goroutines (none is in flight) and the timers.
func (l *loop) close() {
	l.unpark()
	close(l.claims)
	for _, t := range []*time.Timer{l.coolTimer, l.workerWaitTimer} {
		if t != nil {
			t.Stop()
		}
	}
	if l.poll != nil {
		l.poll.Stop()
	}
	if l.cancelClaims != nil {
		l.cancelClaims()
	}
	if l.claimsDeadline != nil {
		l.claimsDeadline.Stop()
	}
}

// endClaims ends the claims' context of a busy spell, if there is one;
// none is in flight.
func (l *loop) endClaims() {
	if l.claimCtx != nil {
		l.cancelClaims()
		l.claimCtx, l.cancelClaims = nil, nil
	}
}

// claimMore sends claims for free workers while the loop may.
func (l *loop) claimMore() {
	e := l.e
	rows := e.traits.RowsPerClaim
	for !l.stopping && !l.idle && !l.cooling && l.free > 0 && l.inflight < l.claimsNow() && l.inflight+e.cfg.Claimer.Held() < e.cfg.Conns {
		if l.inflight >= l.maxClaims && float64(l.inRows+l.w.spare.len()) >= float64(l.free)+l.tripRows() {
			// A far claim beside the one in flight: only while the rows
			// coming and waiting fall short of the free workers and a
			// round trip's worth.
			return
		}
		k := l.e.limit(l.free)
		extra := l.extra(k)
		// A claim that takes spare rows is as large at once: it waits for
		// no more free workers.
		if rows == 0 && extra == 0 && !l.waitedForWorkers && (l.free*2 < e.cfg.Workers || l.waitForAllWorkers && l.backlog && l.free < e.cfg.Workers) {
			if !l.waitingForWorkers {
				l.waitingForWorkers = true
				resetTimer(&l.workerWaitTimer, workerWait)
			}
			return
		}
		l.waitedForWorkers = false
		if rows > 0 {
			k = min(k, rows)
		}
		l.send(k, extra)
	}
}

// send sends a claim for k free workers and extra spare rows.
func (l *loop) send(k, extra int) {
	l.free -= k
	l.inflight++
	l.inRows += k + extra
	l.armPrefetch()
	l.e.stats.claims.Add(1)
	if l.claimCtx == nil {
		l.claimCtx, l.cancelClaims = context.WithCancel(l.claimBase)
	}
	req := claimReq{ctx: l.claimCtx, asked: k + extra, workers: k, gen: l.wakeGen}
	select {
	case l.claims <- req: // a claim goroutine waits
	default:
		go l.claiming(req)
	}
}

// claiming is a claim goroutine. They are kept while claims come back
// full: a claim goes to one that waits, or to a new one when none does yet
// (about one for each claim in flight): a new goroutine's stack grows again
// through the driver's calls on every claim. One whose claim came back
// short or failed ends: its subscription may go idle, and an idle one's
// goroutine and stack would be kept for nothing, one for every idle group
// subscription. The rest end when the loop does, which waits for the
// claims in flight first.
func (l *loop) claiming(r claimReq) {
	for ok := true; ok; r, ok = <-l.claims {
		at, sent := l.e.cfg.Clock.Now(), time.Now()
		jobs, err := l.e.claim(r.ctx, r.asked)
		took := time.Since(sent)
		l.results <- claimResult{at: at, took: took, asked: r.asked, workers: r.workers, jobs: jobs, err: err, gen: r.gen}
		if len(jobs) < r.asked {
			return
		}
	}
}

// onResult dispatches a claim's jobs (or gives them back at the stop) and
// decides when to claim next.
func (l *loop) onResult(ctx context.Context, r claimResult) {
	if !l.stopping && ctx.Err() != nil {
		// The stop and this claim came together: the stop wins, and the
		// rows are given back unstarted.
		l.stop()
	}
	l.inflight--
	l.inRows -= r.asked
	switch {
	case r.err != nil:
	case l.trip == 0:
		// The first round trip is the average's start: from zero it took
		// some ten claims to reach a far database's, each sized for less.
		l.trip = r.took
	default:
		l.trip += (r.took - l.trip) / tripWeight
	}
	n := min(len(r.jobs), r.workers)
	l.free += r.workers - n
	l.backlog = r.err == nil && len(r.jobs) == r.asked
	// No job in work and none waiting when a full claim comes back: the
	// workers waited on the claims (see extra).
	l.starved = l.backlog && l.w.handling.Load() == 0 && l.w.spare.len() == 0
	l.e.stats.claimed.Add(int64(len(r.jobs)))
	if n < len(r.jobs) {
		slices.SortFunc(r.jobs, func(a, b *contract.Job) int { return cmp.Compare(a.ID, b.ID) })
	}
	for i, j := range r.jobs {
		if l.stopping {
			l.e.release(context.Background(), j)
			if i < n {
				l.free++
			}
			continue
		}
		if i < n {
			l.w.dispatch(task{j: j, at: r.at})
		}
	}
	if !l.stopping && n < len(r.jobs) {
		l.w.spare.push(r.jobs[n:], r.at)
	}
	l.armPrefetch()
	switch {
	case r.err != nil:
		l.onFailure(r.err, r.at)
	case len(r.jobs) < r.asked && r.gen == l.wakeGen:
		l.worked()
		l.idle = true
		if len(r.jobs) == 0 {
			l.lastShort = time.Now()
		}
		l.idleWait()
	case len(r.jobs) < r.asked:
		// Woken while the claim ran: claim again, after the cooldown if
		// this one found nothing at all.
		if len(r.jobs) == 0 {
			l.lastShort = time.Now()
			l.cool()
		}
	default:
		l.worked()
		if l.idle && !l.backingOff && l.maxClaims == 1 {
			// The far claim beside it came back short first (see
			// farClaims): this one says the backlog goes on. (Forms of
			// many claims in flight wait for the poll or a wake, as ever.)
			l.resume()
		}
	}
}

// onFailure decides when to claim again after a failed claim. An
// unreachable database is logged once until it is back; any other failure
// (a dropped or altered table) each time, at the backoff's pace. A claim
// sent before the last failure was seen, or failing during a backoff, has
// the same cause: it neither steps nor restarts the backoff.
func (l *loop) onFailure(err error, sent time.Time) {
	e := l.e
	l.failures++
	if l.backingOff || sent.Before(l.failSeen) {
		return
	}
	l.failSeen = e.cfg.Clock.Now()
	if msg := err.Error(); !e.cfg.Unreachable(err) || msg != l.lastErr {
		// Logged once the loop's state says what follows the failure.
		defer e.logger().Error("inbox: claim failed; retrying with backoff", "table", e.cfg.Table, "err", err, "failures", l.failures)
		l.lastErr = msg
	}
	if e.cfg.DeadConn(err) && l.retriedAtOnce <= e.cfg.Conns {
		// Failed on a connection that had ended: the pool dropped it, and
		// the next claim takes another, at once (each such failure ends
		// one dead connection).
		l.retriedAtOnce++
		return
	}
	// Repeated failures back off, doubling; a wake meanwhile is kept: the
	// claim at the backoff's end is the one it asks for.
	l.backedOff++
	l.idle, l.backingOff = true, true
	l.e.outage.Store(true)
	wait := min(MinFailWait<<min(l.backedOff-1, 9), MaxFailWait)
	if e.cfg.Unreachable(err) {
		// A database out of reach (a restart, a failover) is tried again
		// at least once a poll: once it is back, rows wait no longer than
		// an idle subscription's poll, however long the outage lasted.
		wait = min(wait, max(e.cfg.Poll, MinFailWait))
	}
	l.rearm(wait)
}

// worked notes a claim that did not fail: the database answers again, so
// a backoff under way ends and claims go out at once.
func (l *loop) worked() {
	if l.failures > 0 {
		l.e.logger().Info("inbox: claims work again", "table", l.e.cfg.Table)
		l.failures, l.lastErr, l.retriedAtOnce, l.backedOff = 0, "", 0, 0
		l.endBackoff()
	}
}

// endBackoff ends a failure's backoff before its time: the loop claims
// now, and its poll is armed again when a claim comes back short.
func (l *loop) endBackoff() {
	if !l.backingOff {
		return
	}
	l.unpark()
	l.backingOff, l.idle, l.pollArmed = false, false, false
	l.e.outage.Store(false)
	if l.poll != nil {
		l.poll.Stop()
	}
}

// resume ends the idle wait after a short claim, before its poll.
func (l *loop) resume() {
	l.unpark()
	l.idle, l.pollArmed = false, false
	if l.poll != nil {
		l.poll.Stop()
	}
}

// onWake: a publish or a notification. During a failure's backoff it says
// the database may be back (a notification came through): the backoff
// ends and a claim goes out; a failure of that claim steps the backoff on.
func (l *loop) onWake() {
	l.wakeGen++
	if l.backingOff {
		l.endBackoff()
		return
	}
	if l.failures == 0 && l.idle {
		l.unpark()
		l.idle = false
		l.cool()
	}
}

// onPoll is like a wake: a claim in flight now may have started too early
// to see what the poll is for. It also ends a failure's backoff.
func (l *loop) onPoll() {
	if l.backingOff {
		l.backingOff = false
		l.e.outage.Store(false)
	}
	l.pollArmed = false
	l.wakeGen++
	l.idle = false
}

// stop claims no more, and cuts the claims in flight the shutdown timeout
// from now.
func (l *loop) stop() {
	l.unpark()
	l.stopping = true
	l.ctxDone = nil
	if l.cancelClaims != nil { // else no claim is in flight
		l.claimsDeadline = time.AfterFunc(l.e.cfg.Shutdown, l.cancelClaims)
	}
	l.releaseSpare()
}

func (l *loop) cool() {
	if wait := wakeCooldown - time.Since(l.lastShort); wait > 0 {
		l.cooling = true
		resetTimer(&l.coolTimer, wait)
	}
}

// resetTimer arms *t for d, making it at its first use: an idle loop may
// never arm its cooldown or worker wait, and each timer costs 200 B of heap.
func resetTimer(t **time.Timer, d time.Duration) {
	if *t == nil {
		*t = time.NewTimer(d)
		return
	}
	(*t).Reset(d)
}

// timerC is t's channel, nil (never ready) for a timer not made yet.
func timerC(t *time.Timer) <-chan time.Time {
	if t == nil {
		return nil
	}
	return t.C
}

// idleWait waits for the next poll after a short claim: parked with the
// poller when there is one, else on the loop's own.
func (l *loop) idleWait() {
	if l.e.cfg.Poller == nil {
		l.rearm(l.e.cfg.Poll)
		return
	}
	if l.poll != nil {
		// The poller polls for it: its own timer is dropped while parked.
		l.poll.Stop()
		l.poll = nil
	}
	l.pollArmed = false
	l.parked = true
	l.e.cfg.Poller.park(&l.parking)
}

// unpark takes the loop back from the poller, if parked.
func (l *loop) unpark() {
	if l.parked {
		l.parked = false
		l.e.cfg.Poller.unpark(&l.parking)
	}
}

// rearm arms the poll (or a failure's backoff) for d from now.
func (l *loop) rearm(d time.Duration) {
	if l.poll != nil {
		l.poll.Stop()
	}
	l.pollDue = l.e.cfg.Clock.Now().Add(d)
	l.poll = l.e.cfg.Clock.NewTimer(d)
	l.pollArmed = true
}
