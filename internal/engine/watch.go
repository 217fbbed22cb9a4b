package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/internal/claim/contract"
	"github.com/sqlinbox/sqlinbox/internal/inboxtype"
)

// watch keeps the times of the handler a worker runs on one timer, armed
// for the earliest that is due: the timeout, the lease extension and the
// lease's end. The extension is due a third of the lease before it ends and
// runs beside the handler. If the lease ends with no extension confirmed
// (none sent, failed, or still in flight), the handler is told at once (its
// context ends with ErrLeaseLost): another claimer may take the row from
// then on. Once the lease is lost its end is not a time due any more, so the
// timer never fires for a time already past. At the timeout the handler's
// context ends with ErrTimeout and the lease is no longer extended.
//
// A worker keeps its watch, and on the host's clock its timer too: a timer
// armed for one job fires no later than what the next job needs (the times
// of later jobs come later), so it stays armed for them, and when it fires
// early it is armed again for what is due then. Most handlers return long
// before any time is due, so a busy worker arms its timer about once a
// lease, not once a job: a timer's start and stop take the runtime's timer
// lock and allocate. On any other clock the timer is armed for exactly the
// next time due and stopped when the handler returns, so a test sees just
// the timers in use.
type watch struct {
	e     *Engine
	every time.Duration // the lease's extension period
	keep  bool          // the timer outlives a job (the host's clock)

	mu        sync.Mutex
	timer     clock.Timer
	timerAt   time.Time // when timer fires; zero with none armed
	gen       int       // the armed timer; a callback of an older one does nothing
	j         *contract.Job
	cancel    context.CancelCauseFunc
	leased    bool      // the lease form: the lease is extended and can run out
	deadline  time.Time // zero once passed
	extendAt  time.Time // zero while an extension is in flight or none is due
	expires   time.Time // the earliest the lease can end
	handled   bool      // no handler runs
	lost      bool
	extending chan struct{} // closed when the extension in flight ends; nil when none is

	// left is closed when the handler of the id this worker runs returns,
	// for a handling of that id that waits (see inWork); guarded by
	// e.inWork.mu.
	left chan struct{}
}

// newWatch returns a worker's watch.
func (e *Engine) newWatch() *watch {
	w := &watch{e: e, every: e.every, keep: clock.OnHost(e.cfg.Clock), handled: true}
	e.watchMu.Lock()
	e.watches = append(e.watches, w)
	e.watchMu.Unlock()
	return w
}

// begin watches the handler of j, started at now.
func (w *watch) begin(j *contract.Job, cancel context.CancelCauseFunc, now, claimedAt time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.j, w.cancel, w.handled, w.lost = j, cancel, false, false
	w.deadline = now.Add(w.e.cfg.Timeout)
	w.leased = !j.Lease.IsZero() && w.e.traits.HoldExpires
	w.extendAt, w.expires = time.Time{}, time.Time{}
	if w.leased {
		// The lease runs from the claim's statement, which was sent at
		// claimedAt: count from there, not from the handler's start, which
		// a loaded machine may delay by a good part of the lease.
		w.expires = claimedAt.Add(w.e.cfg.Lease)
		w.extendAt = claimedAt.Add(w.every)
	}
	w.arm()
}

// arm sees that the timer fires by the earliest time due; w.mu is held.
func (w *watch) arm() {
	var next time.Time
	if !w.handled {
		next = w.deadline
		if w.leased && !w.lost {
			for _, t := range []time.Time{w.extendAt, w.expires} {
				if !t.IsZero() && (next.IsZero() || t.Before(next)) {
					next = t
				}
			}
		}
	}
	switch {
	case w.timer == nil:
	case next.Equal(w.timerAt):
		return
	case w.keep && (next.IsZero() || !w.timerAt.After(next)):
		return // fires by then, or is kept for the next job
	default:
		w.stop()
	}
	if next.IsZero() {
		return
	}
	w.gen++
	gen := w.gen
	w.timerAt = next
	// The clock is read again: now may be old by a statement, and a fake
	// clock may have moved meanwhile.
	w.timer = clock.AfterFunc(w.e.cfg.Clock, max(next.Sub(w.e.cfg.Clock.Now()), 0), func() { w.fire(gen) })
}

// stop stops the timer; w.mu is held.
func (w *watch) stop() {
	w.timer.Stop()
	w.timer, w.timerAt = nil, time.Time{}
	w.gen++
}

// fire acts on every time that is due, then arms the timer for the next.
func (w *watch) fire(gen int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if gen != w.gen {
		return
	}
	w.timer, w.timerAt = nil, time.Time{}
	if w.handled {
		return // armed for a job done: the next one arms its own
	}
	now := w.e.cfg.Clock.Now()
	if !w.deadline.IsZero() && !now.Before(w.deadline) {
		w.deadline = time.Time{}
		w.extendAt = time.Time{} // no more extensions; one in flight is awaited
		w.cancel(fmt.Errorf("%w after %v", inboxtype.ErrTimeout, w.e.cfg.Timeout))
	}
	if w.leased && !w.lost && !now.Before(w.expires) {
		// Even with an extension in flight: from now on another claimer may
		// take the row, so the handler is told now, not when the extension
		// answers (up to contract.SettleTimeout later). A late success changes
		// nothing: the row comes back when the extended lease runs out.
		w.loseLease("lease ran out with no extension confirmed", nil)
	}
	if w.leased && !w.lost && !w.extendAt.IsZero() && !now.Before(w.extendAt) {
		w.extendAt = time.Time{}
		done := make(chan struct{})
		w.extending = done
		go w.extend(w.j, now, done)
	}
	w.arm()
}

// extend sends the extension of j's lease and acts on its answer. The
// worker's next job waits for it (see finish), so w.j is j throughout.
func (w *watch) extend(j *contract.Job, sent time.Time, done chan struct{}) {
	defer close(done)
	ctx, cancel := context.WithTimeout(context.Background(), contract.SettleTimeout)
	err := j.Extend(ctx, w.e.cfg.Lease)
	cancel()

	w.mu.Lock()
	defer w.mu.Unlock()
	w.extending = nil
	timedOut := w.deadline.IsZero()
	now := w.e.cfg.Clock.Now()
	switch {
	case w.lost:
		return // the handler is told: the outcome decides
	case w.handled:
		// The handler returned meanwhile: no more extensions, but a lease
		// written moves the row's end, until which a settlement that fails
		// with the database is sent again (leaseEnds).
		if err == nil {
			w.expires = sent.Add(w.e.cfg.Lease)
		}
		return
	case errors.Is(err, contract.ErrLost):
		w.loseLease("lease lost while the handler ran", err)
	case err != nil && !now.Before(w.expires):
		w.loseLease("lease ran out while its extension failed", err)
	case err != nil:
		w.e.logger().Warn("inbox: lease extension failed; trying again", "table", w.e.cfg.Table, "id", j.ID, "err", err)
		if !timedOut {
			w.extendAt = now.Add(w.every / 4)
		}
	default:
		w.expires = sent.Add(w.e.cfg.Lease)
		if !timedOut {
			w.extendAt = sent.Add(w.every)
		}
	}
	w.arm()
}

// leaseEnds is the earliest the lease of the job last watched can end,
// once its handler returned; zero where the hold is not a lease.
func (w *watch) leaseEnds() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.leased {
		return time.Time{}
	}
	return w.expires
}

// loseLease tells the handler its lease is gone; w.mu is held.
func (w *watch) loseLease(why string, err error) {
	w.lost = true
	w.e.stats.lost.Add(1)
	w.e.logger().Warn("inbox: "+why+"; the handler is told and its outcome will change nothing", "table", w.e.cfg.Table, "id", w.j.ID, "err", err)
	w.cancel(inboxtype.ErrLeaseLost)
}

// loseHold tells the handler of j that the connection holding its row
// ended. A call for a job the worker no longer runs (its callback started
// as the handler returned) does nothing.
func (w *watch) loseHold(j *contract.Job) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.j != j || w.handled || w.lost {
		return
	}
	w.lost = true
	w.e.stats.lost.Add(1)
	w.e.logger().Warn("inbox: the connection holding the row ended; the handler is told and its outcome will change nothing", "table", w.e.cfg.Table, "id", w.j.ID)
	w.cancel(inboxtype.ErrHoldLost)
}

// claimedAgain tells the handler of id, if the worker still runs it, that
// its row was claimed again (by this process): its hold ended before the
// watch saw it, as when the connection holding it was killed between two
// pings on MySQL.
func (w *watch) claimedAgain(id int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.j == nil || w.j.ID != id || w.handled || w.lost {
		return
	}
	w.lost = true
	w.e.stats.lost.Add(1)
	w.e.logger().Warn("inbox: the row was claimed again while its handler runs: its hold had ended; the handler is told, its outcome will change nothing, and the new handling waits for it to return", "table", w.e.cfg.Table, "id", id)
	if w.leased {
		w.cancel(inboxtype.ErrLeaseLost)
	} else {
		w.cancel(inboxtype.ErrHoldLost)
	}
}

// finish ends the watch of a handler that has returned: it waits for an
// extension in flight and reports whether the lease was lost. On a clock
// other than the host's the timer is stopped.
func (w *watch) finish() (lost bool) {
	w.mu.Lock()
	w.handled = true
	w.arm()
	extending := w.extending
	w.mu.Unlock()
	if extending != nil {
		<-extending
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	lost = w.lost
	w.e.inWork.leave(w.j.ID, w)
	w.j, w.cancel = nil, nil
	return lost
}
