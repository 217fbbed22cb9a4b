package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/claim/contract"
	"github.com/sqlinbox/sqlinbox/internal/inboxtype"
)

// task is one claimed job handed to a worker goroutine.
type task struct {
	j  *contract.Job
	at time.Time // when its claim was sent
}

// workers run handlers and hand their jobs to settlement. Worker
// goroutines are kept: one handles a job, settles it once another goroutine
// may take the next job (or hands an ack to the form), then waits for a
// task. A job goes to a goroutine that waits, or to a new one when none
// does, so there are at most about twice as many as workers (handling, and
// settling), and no job pays for a goroutine's start and stack growth.
//
// A worker is free once its handler returns; the row's settlement (the
// ack, mostly) goes on beside the next handler, at most as many in flight
// as there are workers, so no worker waits on a commit. Acks handed to the
// form (contract.AsyncAcker) hold no goroutine (but while a failed one is
// sent again) and have slots of their own, as many again as the spare rows
// a claim may bring (ackRoom): they are what an ack statement groups, and
// with no more in flight than workers a process of few workers sent few
// rows a statement (8 processes x 25 workers, lease, Postgres: 22 rows an
// ack statement and 0.055 commits a job, against 0.025 with the room).
//
// Workers count what they freed and what is settling, and signal the loop
// when it has something to decide: with one claim in flight in a form whose
// hold pins no connection, at the first worker freed, at half of them and
// at all (the points a claim waits for), and when the last settlement ends;
// otherwise (a connection freed may be what the loop waits on, see
// contract.Claimer.Held) at every freeing and every settlement's end. Signals
// that come while the loop is busy fold into one, so the loop is not woken
// once a job with nothing to decide.
type workers struct {
	e *Engine

	// ctx is the handlers' own: it outlives Run's (runCtx) by the shutdown
	// timeout. It and the channels are made for the first worker goroutine
	// (see ready).
	runCtx context.Context
	ctx    context.Context
	cancel context.CancelCauseFunc

	tasks    chan task // closed when the loop ends
	handlers sync.WaitGroup
	acking   sync.WaitGroup // acks sent without a waiter, not yet answered
	slots    chan struct{}  // settlements in flight on worker goroutines
	ackSlots chan struct{}  // acks in flight without a waiter (see workers)

	freed, settling, handling atomic.Int64
	handled                   atomic.Int64 // handlers returned, for the loop's rate
	spare                     spare
	changed                   chan struct{} // a worker freed or a settlement ended
	signalEach                bool
	firstFree, halfFree       int64

	// An ack sent without a waiter keeps its handling in an ackWait until
	// it is answered; they are reused, with the callback each was made
	// with, rather than made anew for every job.
	waits sync.Pool
}

func newWorkers(e *Engine, ctx context.Context) *workers {
	n := e.cfg.Workers
	w := &workers{e: e,
		firstFree: int64(n - 1), halfFree: int64(n - (n+1)/2), runCtx: ctx}
	w.spare.done = ctx.Done()
	w.spare.low.Store(-1)
	w.waits.New = func() any { return newAckWait(w) }
	return w
}

// dispatch hands a claimed job to a waiting worker goroutine, or to a new
// one.
func (w *workers) dispatch(t task) {
	w.handling.Add(1)
	select {
	case w.tasks <- t:
	default:
		w.ready()
		w.handlers.Add(1)
		go w.run(t)
	}
}

// ready makes what the worker goroutines share, before the first starts:
// a subscription that never handled a row keeps none of it (0.5 kB of an
// idle one's heap). Until then tasks and changed are nil, never ready.
func (w *workers) ready() {
	if w.tasks != nil {
		return
	}
	n := w.e.cfg.Workers
	w.tasks, w.changed = make(chan task), make(chan struct{}, 1)
	w.slots, w.ackSlots = make(chan struct{}, n), make(chan struct{}, n+ackRoom(n))
	w.ctx, w.cancel = context.WithCancelCause(context.WithoutCancel(w.runCtx))
}

// run is a worker goroutine: it handles t, then every task it gets after.
func (w *workers) run(t task) {
	defer w.handlers.Done()
	watch := w.e.newWatch()
	for ok := true; ok; {
		w.e.inWork.enter(t.j.ID, watch)
		h := w.e.work(w.ctx, watch, t.j, t.at)
		// A claim's Jobs may share one slab (claim.Scanner): the user's
		// row is dropped now, so a job still in work does not keep its
		// claim-mates' rows (and payloads) alive.
		t.j.Value = nil
		async := h.async()
		if async {
			w.ackSlots <- struct{}{}
		} else {
			w.slots <- struct{}{}
		}
		w.settling.Add(1)
		w.handled.Add(1)
		// A spare row is taken before the worker counts free: it stays
		// busy, and the loop hears of it only once the spare rows are gone.
		next, skipped, more := w.pop()
		if len(skipped) > 0 {
			w.settling.Add(1) // the loop is not idle before they are settled
		}
		if !more {
			w.freed.Add(1)
			if left := w.handling.Add(-1); w.signalEach || left == w.firstFree || left == w.halfFree || left == 0 {
				signal(w.changed)
			}
		}
		w.settle(h, async)
		if len(skipped) > 0 {
			w.e.putBack(skipped)
			if w.settling.Add(-1) == 0 || w.signalEach {
				signal(w.changed)
			}
		}
		if more {
			t = next
			continue
		}
		t, ok = <-w.tasks
	}
}

// settle hands a handled job's ack to the form (async, its slot one of
// ackSlots), or settles it here (its slot one of slots).
func (w *workers) settle(h handling, async bool) {
	if async {
		w.acking.Add(1)
		aw := w.waits.Get().(*ackWait)
		aw.h = h
		h.j.Settler.(contract.AsyncAcker).AckAsync(aw.done)
		return
	}
	w.e.settleHandling(w.ctx, &h)
	w.endSettlement(w.slots)
}

// endSettlement frees a settlement's slot and tells the loop where it
// decides.
func (w *workers) endSettlement(slot chan struct{}) {
	<-slot
	if w.settling.Add(-1) == 0 || w.signalEach {
		signal(w.changed)
	}
}

// shutdown lets running handlers finish within the shutdown timeout, then
// cancels their contexts, and gives up on those that ignore it after one
// more timeout: their rows come back when their lease or connection ends.
func (w *workers) shutdown() {
	e := w.e
	defer w.cancelHandlers(nil)
	if w.tasks == nil {
		return // no handler ever ran
	}
	close(w.tasks)
	// Nothing reads the signals any more; a worker's signal never blocks.
	finished := make(chan struct{})
	go func() { w.handlers.Wait(); w.acking.Wait(); close(finished) }()
	deadline := e.cfg.Clock.NewTimer(e.cfg.Shutdown)
	defer deadline.Stop()
	select {
	case <-finished:
		return
	case <-deadline.C():
	}
	w.cancelHandlers(e.errShutdown())
	e.logger().Warn("inbox: handlers still running at the shutdown timeout; their contexts are cancelled", "timeout", e.cfg.Shutdown)
	grace := time.NewTimer(e.cfg.Shutdown)
	defer grace.Stop()
	select {
	case <-finished:
	case <-grace.C:
		e.logger().Error("inbox: handlers ignore their cancelled context; Run returns without them", "timeout", e.cfg.Shutdown)
	}
}

// cancelHandlers ends the handlers' context, if a handler ever ran.
func (w *workers) cancelHandlers(cause error) {
	if w.cancel != nil {
		w.cancel(cause)
	}
}

// ackWait holds a handling while its ack is in flight without a waiter.
type ackWait struct {
	h    handling
	done func(error) // reports the ack and puts the ackWait back
}

func newAckWait(w *workers) *ackWait {
	aw := &ackWait{}
	finish := func(err error) {
		w.e.reportAck(&aw.h, err)
		w.endSettlement(w.ackSlots)
		w.acking.Done()
		aw.h = handling{}
		w.waits.Put(aw)
	}
	aw.done = func(err error) {
		if err != nil && !errors.Is(err, contract.ErrLost) && (w.e.cfg.DeadConn(err) || !aw.h.holdEnds.IsZero() && w.e.cfg.Unreachable(err)) {
			// Sent again, fenced, on another connection (see again);
			// not on the form's goroutine, which this call must not
			// hold up.
			go func() {
				finish(w.e.again(w.ctx, aw.h.j, "ack", aw.h.holdEnds, func() error { return aw.h.j.Ack(context.Background()) }))
			}()
			return
		}
		finish(err)
	}
	return aw
}

// ackRoom is how many acks beyond its n workers a subscription may have
// handed to its form unanswered: as many as the rows farClaims claims may
// bring under a backlog however far the database (batchRows), so a
// process of few workers fills an ack statement as one of many does, acks
// sent while a statement is on its round trip do not hold up the workers
// (the lease form sends a second statement for a whole batch beside the
// first), and a process of a single worker runs at most 20 jobs ahead of
// its committed acks.
func ackRoom(n int) int { return farClaims * batchRows(n, maxBatch) }

// async says the job is acked by its form without a waiter.
func (h *handling) async() bool {
	_, ok := h.j.Settler.(contract.AsyncAcker)
	return ok && h.err == nil && !h.lost
}

// handling is what a worker keeps of one handled job until it is settled.
type handling struct {
	j    *contract.Job
	err  error // the handler's
	lost bool  // the lease or hold was lost while the handler ran
	// holdEnds is the earliest the row's lease can end, on the engine's
	// clock; zero where the hold is not a lease.
	holdEnds time.Time
	ev       inboxtype.Event
}

// work runs the handler on one job, on the calling goroutine, while the
// worker's watch ends its context at the timeout, extends its lease and
// tells it of a lost hold. It returns what the settlement needs, which the
// caller runs once the worker is free for the next job.
func (e *Engine) work(ctx context.Context, w *watch, j *contract.Job, claimedAt time.Time) handling {
	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	now := e.cfg.Clock.Now()
	h := handling{j: j, ev: inboxtype.Event{Subscription: e.cfg.Name, ID: j.ID, Attempt: max(j.Attempts, 1), Start: now, Outcome: inboxtype.Failed}}
	e.cfg.Prepare(j)

	// The watch first, then the handler: a test on a fake clock that sees
	// the handler start finds its timer armed.
	w.begin(j, cancel, now, claimedAt)
	if holder, ok := j.Settler.(contract.Holder); ok {
		// stop does not wait for a callback already started: it is tied to
		// j, so one that runs after the next job began does nothing.
		stop := context.AfterFunc(holder.Hold(), func() { w.loseHold(j) })
		defer stop()
	}
	err := j.Err // a row that cannot be read is a failure, without the handler
	if err == nil && e.cfg.Counts && j.Attempts > e.cfg.MaxAttempts {
		err = fmt.Errorf("inbox: row %d of %q was claimed %d times, more than MaxAttempts (%d): its earlier handlings never settled (their process died, or their handler never returned); parked without running the handler", j.ID, e.cfg.Table, j.Attempts, e.cfg.MaxAttempts)
	}
	if err == nil {
		err = e.call(hctx, j)
	}
	h.lost = w.finish()
	h.holdEnds = w.leaseEnds()
	if cause := context.Cause(hctx); err != nil && errors.Is(cause, inboxtype.ErrTimeout) {
		err = withCause(cause, err)
	} else if errors.Is(cause, inboxtype.ErrCanceled) {
		// Whatever the handler returned, nil too: the row is parked or
		// deleted as the cancel asked, never acked or retried past it.
		err = withCause(cause, err)
	}
	h.err, h.ev.Err = err, err
	return h
}

// withCause is the error of a handler whose context ended with cause: the
// cause, with the handler's own error beside it (one that is the context's
// error, or none, says nothing more).
func withCause(cause, err error) error {
	if err != nil && err != cause && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("%w (the handler returned: %v)", cause, err)
	}
	return cause
}

// call runs the handler, turning a panic into an error that carries the
// panic's text.
func (e *Engine) call(ctx context.Context, j *contract.Job) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
			e.logger().Error("inbox: handler panicked; the row is retried", "id", j.ID, "panic", p, "stack", string(debug.Stack()))
		}
	}()
	return e.cfg.Handle(ctx, j)
}

// signal sends on a channel of capacity one unless a send is pending already.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
