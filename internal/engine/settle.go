package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/claim/contract"
	"github.com/sqlinbox/sqlinbox/internal/inboxtype"
)

// settleTries is how often a settlement that failed on a dead connection is
// sent at once: each failure ends one dead connection of the pool, and the
// statements are fenced, so a repeat changes nothing that the first did.
const settleTries = 3

// The pace of a lease's settlement sent again while the database is out:
// from resendFirst, doubled up to resendMax. A failover lasts seconds, so
// the cap is short: the settlement lands within a second of the database's
// return. Host time: it paces statements.
const (
	resendFirst = 50 * time.Millisecond
	resendMax   = time.Second
)

// again runs a settlement, and again while it fails with the database,
// never once its hold was lost (ErrLost, final).
//
// Where the hold is a lease (holdEnds is set), a settlement that failed on
// a dead connection or an unreachable database is sent again with backoff
// until the lease nears its end (holdEnds less a tenth of the lease, on
// the engine's clock), or until ctx ends (the shutdown timeout): an outage
// shorter than the lease then leaves the row settled, not handed to another
// claimer to be handled twice. Each statement is fenced on the lease its
// claim wrote, so a repeat never settles a row someone else claimed since.
// First, in every form, a settlement that failed on a dead connection is
// sent again at once, up to settleTries sends: the pool's next connection
// may be alive. A hold that ends with its connection (row lock, advisory)
// goes no further: it was lost with the connection (the form answers
// ErrLost), and the row is claimable again.
func (e *Engine) again(ctx context.Context, j *contract.Job, what string, holdEnds time.Time, f func() error) error {
	err := f()
	tries := 1
	for ; tries < settleTries && err != nil && e.cfg.DeadConn(err) && !errors.Is(err, contract.ErrLost); tries++ {
		err = f()
	}
	if holdEnds.IsZero() || err == nil || errors.Is(err, contract.ErrLost) || !e.cfg.Unreachable(err) {
		return err
	}
	until := holdEnds.Add(-e.cfg.Lease / 10)
	pause, first := resendFirst, tries
	for err != nil && !errors.Is(err, contract.ErrLost) && e.cfg.Unreachable(err) {
		left := until.Sub(e.cfg.Clock.Now())
		if left <= 0 {
			return fmt.Errorf("%w (sent %d times until the row's lease neared its end)", err, tries)
		}
		if tries == first {
			e.logger().Warn("inbox: "+what+" failed with the database; sent again until the row's lease nears its end", "table", e.cfg.Table, "id", j.ID, "until", until, "err", err)
		}
		t := time.NewTimer(min(pause, left))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (sent %d times; given up at the shutdown timeout)", err, tries)
		}
		pause = min(pause*2, resendMax)
		tries++
		err = f()
	}
	switch {
	case err == nil:
		e.logger().Info("inbox: "+what+" sent again landed", "table", e.cfg.Table, "id", j.ID, "tries", tries)
	case errors.Is(err, contract.ErrLost):
		// A send whose connection ended may have committed first.
		err = fmt.Errorf("%w (sent %d times: a send whose connection ended may have settled the row)", err, tries)
	}
	return err
}

// settleHandling settles a handled job and reports its event.
// ctx ends the sends of a settlement again (see again).
func (e *Engine) settleHandling(ctx context.Context, h *handling) {
	var serr error
	h.ev.Outcome, serr = e.settle(ctx, h, h.err, h.lost)
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
func (e *Engine) settle(ctx context.Context, h *handling, err error, lost bool) (inboxtype.Outcome, error) {
	j := h.j
	if lost {
		if f, ok := j.Settler.(contract.Forgetter); ok {
			f.Forget() // never settled: the form stops counting it in work
		}
		return inboxtype.Lost, nil
	}
	if err == nil {
		// Every form bounds its own ack (contract.Settler): no timer a job here.
		if serr := e.again(ctx, j, "ack", h.holdEnds, func() error { return j.Ack(context.Background()) }); serr != nil {
			return e.settleFailed(j, "ack", serr), serr
		}
		e.stats.acked.Add(1)
		return inboxtype.Acked, nil
	}
	var canceled *inboxtype.CancelCause
	if errors.As(err, &canceled) {
		return e.settleCanceled(ctx, h, canceled.Delete, err)
	}
	verdict, delay := e.cfg.ErrorVerdict(err)
	attempt := max(j.Attempts, 1)
	switch {
	case verdict == Snooze:
		if serr := e.again(ctx, j, "snooze", h.holdEnds, bounded(func(c context.Context) error { return j.Snooze(c, delay) })); serr != nil {
			return e.settleFailed(j, "snooze", serr), serr
		}
		e.stats.snoozed.Add(1)
		return inboxtype.Snoozed, nil
	case verdict == Park || e.cfg.Counts && attempt >= e.cfg.MaxAttempts:
		if serr := e.again(ctx, j, "park", h.holdEnds, bounded(func(c context.Context) error { return j.Park(c, err.Error()) })); serr != nil {
			return e.settleFailed(j, "park", serr), serr
		}
		e.stats.parked.Add(1)
		e.logger().Warn("inbox: row parked", "table", e.cfg.Table, "id", j.ID, "attempts", attempt, "err", err)
		return inboxtype.Parked, nil
	case verdict == Retry:
		delay = e.backoff(j.ID, attempt)
	}
	if serr := e.again(ctx, j, "retry", h.holdEnds, bounded(func(c context.Context) error { return j.Retry(c, delay, err.Error()) })); serr != nil {
		return e.settleFailed(j, "retry", serr), serr
	}
	e.stats.retried.Add(1)
	e.logger().Debug("inbox: handler failed; row retried", "table", e.cfg.Table, "id", j.ID, "attempt", attempt, "delay", delay, "err", err)
	return inboxtype.Retried, nil
}

// bounded runs f with a context of its own bound: each send of a
// settlement gets one, since sends again may outlast one.
func bounded(f func(context.Context) error) func() error {
	return func() error {
		sctx, cancel := context.WithTimeout(context.Background(), contract.SettleTimeout)
		defer cancel()
		return f(sctx)
	}
}

// settleCanceled parks a canceled row with its cancel as the last error,
// or deletes it (an ack) where the cancel asked, fenced on this claim as
// every settlement is: a row claimed since is never touched.
func (e *Engine) settleCanceled(ctx context.Context, h *handling, del bool, err error) (inboxtype.Outcome, error) {
	j := h.j
	what, send := "park", bounded(func(c context.Context) error { return j.Park(c, err.Error()) })
	if del {
		what, send = "delete", func() error { return j.Ack(context.Background()) }
	}
	if serr := e.again(ctx, j, what, h.holdEnds, send); serr != nil {
		return e.settleFailed(j, what, serr), serr
	}
	e.stats.canceled.Add(1)
	e.logger().Info("inbox: row canceled by an operator", "table", e.cfg.Table, "id", j.ID, "deleted", del, "err", err)
	return inboxtype.Canceled, nil
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
