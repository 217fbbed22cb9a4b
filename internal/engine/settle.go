package engine

import (
	"context"
	"errors"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/claim/contract"
	"github.com/sqlinbox/sqlinbox/internal/inboxtype"
)

// settleTries is how often a settlement that failed on a dead connection is
// sent: each failure ends one dead connection of the pool, and the
// statements are fenced, so a repeat changes nothing that the first did.
const settleTries = 3

// again runs a settlement, and again while it fails on a dead connection
// (never one whose hold was lost: that is ErrLost, and final).
func (e *Engine) again(f func() error) error {
	err := f()
	for i := 1; i < settleTries && err != nil && e.cfg.DeadConn(err) && !errors.Is(err, contract.ErrLost); i++ {
		err = f()
	}
	return err
}

// settleHandling settles a handled job and reports its event.
func (e *Engine) settleHandling(h *handling) {
	var serr error
	h.ev.Outcome, serr = e.settle(h.j, h.err, h.lost)
	if h.ev.Outcome == inboxtype.Failed {
		h.ev.Err = errors.Join(h.ev.Err, serr)
	} else if serr == nil && e.outage.Load() {
		e.outage.Store(false)
	}
	e.report(&h.ev)
}

// reportAck counts and reports an ack the form answered on its own.
func (e *Engine) reportAck(h *handling, err error) {
	h.ev.Outcome = inboxtype.Acked
	if err != nil {
		h.ev.Outcome = e.settleFailed(h.j, "ack", err)
		if h.ev.Outcome == inboxtype.Failed {
			h.ev.Err = err
		}
	} else {
		e.stats.acked.Add(1)
		if e.outage.Load() {
			e.outage.Store(false)
		}
	}
	e.report(&h.ev)
}

func (e *Engine) report(ev *inboxtype.Event) {
	if e.cfg.Observe != nil {
		ev.End = e.cfg.Clock.Now()
		e.cfg.Observe(*ev)
	}
}

// settle acks, retries, parks or snoozes a job whose handler returned err,
// and returns the outcome, with the settlement's error when it failed.
func (e *Engine) settle(j *contract.Job, err error, lost bool) (inboxtype.Outcome, error) {
	if lost {
		if f, ok := j.Settler.(contract.Forgetter); ok {
			f.Forget() // never settled: the form stops counting it in work
		}
		return inboxtype.Lost, nil
	}
	if err == nil {
		// Every form bounds its own ack (contract.Settler): no timer a job here.
		if serr := e.again(func() error { return j.Ack(context.Background()) }); serr != nil {
			return e.settleFailed(j, "ack", serr), serr
		}
		e.stats.acked.Add(1)
		return inboxtype.Acked, nil
	}
	sctx, scancel := context.WithTimeout(context.Background(), contract.SettleTimeout)
	defer scancel()
	verdict, delay := e.cfg.ErrorVerdict(err)
	attempt := max(j.Attempts, 1)
	switch {
	case verdict == Snooze:
		if serr := e.again(func() error { return j.Snooze(sctx, delay) }); serr != nil {
			return e.settleFailed(j, "snooze", serr), serr
		}
		e.stats.snoozed.Add(1)
		return inboxtype.Snoozed, nil
	case verdict == Park || e.cfg.Counts && attempt >= e.cfg.MaxAttempts:
		if serr := e.again(func() error { return j.Park(sctx, err.Error()) }); serr != nil {
			return e.settleFailed(j, "park", serr), serr
		}
		e.stats.parked.Add(1)
		e.logger().Warn("inbox: row parked", "table", e.cfg.Table, "id", j.ID, "attempts", attempt, "err", err)
		return inboxtype.Parked, nil
	case verdict == Retry:
		delay = e.backoff(j.ID, attempt)
	}
	if serr := e.again(func() error { return j.Retry(sctx, delay, err.Error()) }); serr != nil {
		return e.settleFailed(j, "retry", serr), serr
	}
	e.stats.retried.Add(1)
	e.logger().Debug("inbox: handler failed; row retried", "table", e.cfg.Table, "id", j.ID, "attempt", attempt, "delay", delay, "err", err)
	return inboxtype.Retried, nil
}

// backoff is the delay after a failed attempt.
func (e *Engine) backoff(id int64, attempt int) time.Duration {
	if e.cfg.Backoff != nil {
		return e.cfg.Backoff(attempt)
	}
	return jittered(id, attempt, MaxBackoff)
}

// MaxBackoff caps the default backoff (inbox.MaxBackoff).
const MaxBackoff = 10 * time.Minute

func (e *Engine) settleFailed(j *contract.Job, what string, err error) inboxtype.Outcome {
	if errors.Is(err, contract.ErrLost) {
		e.stats.lost.Add(1)
		e.logger().Warn("inbox: claim lost before "+what+" (its lease was taken over, or the connection holding it ended); the row is someone else's now and this outcome changes nothing", "table", e.cfg.Table, "id", j.ID, "err", err)
		return inboxtype.Lost
	}
	e.stats.failed.Add(1)
	e.logger().Error("inbox: "+what+" failed; the row comes back after its lease", "table", e.cfg.Table, "id", j.ID, "err", err)
	return inboxtype.Failed
}

// release gives back a row unstarted (at the stop, or a spare row that may
// not start), within parent.
func (e *Engine) release(parent context.Context, j *contract.Job) {
	ctx, cancel := context.WithTimeout(parent, contract.SettleTimeout)
	defer cancel()
	if err := j.Release(ctx); err != nil {
		e.logger().Warn("inbox: could not give back an unstarted row; it waits out its lease", "table", e.cfg.Table, "id", j.ID, "err", err)
		return
	}
	e.stats.released.Add(1)
	if e.cfg.Observe != nil {
		now := e.cfg.Clock.Now()
		e.cfg.Observe(inboxtype.Event{Subscription: e.cfg.Name, ID: j.ID, Attempt: max(j.Attempts, 1), Start: now, End: now, Outcome: inboxtype.Released})
	}
}
