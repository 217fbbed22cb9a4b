package schedule

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// A moment's shares are rows that live instances claim with a lease, as an
// inbox claims its rows: the instance a share was dealt to claims it at the
// moment, renews its lease while the handler runs and marks the row done when
// the handler returns. A share whose lease ran out (its instance died, or
// never claimed it within a lease) is taken over by the next sweep of any
// live instance that has the schedule, with a new token, so the dead
// holder's late renewal or settlement changes nothing.

// shareKey names a share: its schedule, its moment in Unix milliseconds and
// its worker.
type shareKey struct {
	schedule string
	moment   int64
	worker   int
}

// heldShare is a share this instance runs.
type heldShare struct {
	token    string
	renewed  time.Time // when its lease was last written
	cancel   context.CancelCauseFunc
	returned bool // the handler returned: a loss found now cancels nothing
}

// leaseTick is how often held shares are renewed and orphans looked for: a
// third of the lease, so a renewal that fails once still leaves time for
// the next, and an orphan waits at most a third of a lease past its end.
func (s *Scheduler) leaseTick() time.Duration { return s.lease / 3 }

// startAll starts runs claimed under token, or hands them back when Stop
// began meanwhile (ctx is the loop's).
func (s *Scheduler) startAll(ctx context.Context, e *entry, runs []Run, token string) {
	for _, r := range runs {
		if ctx.Err() != nil {
			s.release(e, r, token)
			continue
		}
		s.start(e, r, token)
	}
}

// start runs one share in its own goroutine, renewed while it runs, and
// settles it when the handler returns.
func (s *Scheduler) start(e *entry, r Run, token string) {
	key := shareKey{e.name, r.FiredAt.UnixMilli(), r.Worker}
	ctx, cancel := context.WithCancelCause(s.runsCtx)
	h := &heldShare{token: token, renewed: s.clk.Now(), cancel: cancel}
	s.heldMu.Lock()
	s.held[key] = h
	s.heldMu.Unlock()
	s.runs.Add(1)
	e.running.Add(1)
	go func() {
		defer s.runs.Done()
		defer e.ended()
		err := s.call(ctx, e, r)
		e.tally.add(err, s.clk.Now())
		s.heldMu.Lock()
		h.returned = true
		s.heldMu.Unlock()
		// The share stays held, its lease renewed, until it is settled.
		defer func() {
			s.heldMu.Lock()
			if s.held[key] == h {
				delete(s.held, key)
			}
			s.heldMu.Unlock()
		}()
		lost := errors.Is(context.Cause(ctx), ErrShareLost)
		switch {
		case lost:
			// A lost share is another's.
		case err != nil && s.runsCtx.Err() != nil:
			s.release(e, r, token) // cut short by Stop: another instance runs it
		default:
			s.finish(e, r, h, err)
		}
		cancel(nil)
	}()
}

// call runs the handler, logging its error or panic with the share.
func (s *Scheduler) call(ctx context.Context, e *entry, r Run) (err error) {
	attrs := func(extra ...any) []any {
		return append([]any{"schedule", r.Schedule, "fired_at", r.FiredAt, "worker", r.Worker, "workers", r.Workers,
			"instance", s.name, "instance_index", r.Instance, "instances", r.Instances, "runner", r.Runner, "runners", r.Runners,
			"dealt_to", r.DealtTo}, extra...)
	}
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("schedule: handler panicked", attrs("panic", fmt.Sprint(p), "stack", string(debug.Stack()))...)
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	if err := e.handler(ctx, r); err != nil {
		s.log.Error("schedule: handler failed", attrs("error", err)...)
		return err
	}
	return nil
}

// finish marks a share that ran done, with its handler's error (runErr)
// for operators. The share stays held meanwhile (its lease renewed), and a
// write that fails because the database is out is sent again with backoff
// until the share's lease nears its end (see markDone): an outage shorter
// than the lease does not run the share twice. The write is fenced on the
// share's token, so once the lease ran out and another instance took the
// share over, it changes nothing.
func (s *Scheduler) finish(e *entry, r Run, h *heldShare, runErr error) {
	var text string
	if runErr != nil {
		text = errorText(runErr)
	}
	err := s.markDone(e, r, h, runErr != nil, text)
	if err != nil {
		s.log.Warn("schedule: could not mark a share done; another instance may run it again once its lease runs out",
			"schedule", e.name, "instance", s.name, "fired_at", r.FiredAt, "worker", r.Worker, "error", err)
	}
}

// The pace of a share's done sent again while the database is out: from
// doneFirst, doubled up to doneMax (host time: it paces statements).
const (
	doneFirst = 50 * time.Millisecond
	doneMax   = time.Second
)

// markDone writes the share done, again while the database is unreachable
// and the share's lease, as last renewed, has more than a tenth of it left
// (or until Stop's context ends).
func (s *Scheduler) markDone(e *entry, r Run, h *heldShare, failed bool, text string) error {
	send := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), s.ttl)
		defer cancel()
		q := s.sql.Finish.Call(s.clk.Now(), failed, text, e.name, r.FiredAt, r.Worker, h.token)
		_, err := s.db.ExecContext(ctx, q.SQL, q.Args...)
		return err
	}
	err := send()
	tries, pause := 1, doneFirst
	for err != nil && s.d.Unreachable(err) {
		s.heldMu.Lock()
		until := h.renewed.Add(s.lease - s.lease/10)
		s.heldMu.Unlock()
		left := until.Sub(s.clk.Now())
		if left <= 0 {
			return fmt.Errorf("%w (sent %d times until the share's lease neared its end)", err, tries)
		}
		if tries == 1 {
			s.log.Warn("schedule: could not mark a share done; sent again while its lease lasts",
				"schedule", e.name, "instance", s.name, "fired_at", r.FiredAt, "worker", r.Worker, "error", err)
		}
		t := time.NewTimer(min(pause, left))
		select {
		case <-t.C:
		case <-s.runsCtx.Done():
			t.Stop()
			return fmt.Errorf("%w (sent %d times; given up when Stop's context ended)", err, tries)
		}
		pause = min(pause*2, doneMax)
		tries++
		err = send()
	}
	if err == nil && tries > 1 {
		s.log.Info("schedule: a share's done sent again landed", "schedule", e.name, "instance", s.name,
			"fired_at", r.FiredAt, "worker", r.Worker, "tries", tries)
	}
	return err
}

// release hands a share back: its lease ends now, for the next sweep.
func (s *Scheduler) release(e *entry, r Run, token string) {
	ctx, cancel := context.WithTimeout(context.Background(), s.ttl)
	defer cancel()
	q := s.sql.Release.Call(s.clk.Now(), e.name, r.FiredAt, r.Worker, token)
	if _, err := s.db.ExecContext(ctx, q.SQL, q.Args...); err != nil {
		s.log.Warn("schedule: could not hand a share back; another instance takes it once its lease runs out",
			"schedule", e.name, "instance", s.name, "fired_at", r.FiredAt, "worker", r.Worker, "error", err)
	}
}

// renewals renews the lease of every share this instance runs, every
// leaseTick, until Stop (or a crash) ends it. A share whose renewal finds it
// taken over, or that went a whole lease without a renewal, is lost: its
// handler's context ends with ErrShareLost.
func (s *Scheduler) renewals(ctx context.Context) {
	defer close(s.renewDone)
	for {
		if clock.Sleep(ctx, s.clk, s.leaseTick()) != nil {
			return
		}
		s.heldMu.Lock()
		keys := make([]shareKey, 0, len(s.held))
		for k := range s.held {
			keys = append(keys, k)
		}
		s.heldMu.Unlock()
		for _, k := range keys {
			s.renew(ctx, k)
		}
	}
}

// renew extends one held share's lease.
func (s *Scheduler) renew(ctx context.Context, k shareKey) {
	s.heldMu.Lock()
	h := s.held[k]
	s.heldMu.Unlock()
	if h == nil {
		return // ended meanwhile
	}
	now := s.clk.Now()
	rctx, cancel := context.WithTimeout(ctx, s.lease)
	defer cancel()
	q := s.sql.Renew.Call(now, s.lease, k.schedule, time.UnixMilli(k.moment), k.worker, h.token)
	res, err := s.db.ExecContext(rctx, q.SQL, q.Args...)
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	s.heldMu.Lock()
	returned := h.returned
	if err == nil && n == 1 {
		h.renewed = now
	}
	s.heldMu.Unlock()
	switch {
	case err == nil && n == 1, returned:
	case err == nil:
		s.log.Warn("schedule: a running share was taken over by another instance; its handler is cancelled",
			"schedule", k.schedule, "instance", s.name, "moment", time.UnixMilli(k.moment).UTC(), "worker", k.worker)
		h.cancel(ErrShareLost)
	case s.clk.Now().Sub(h.renewed) >= s.lease:
		s.log.Warn("schedule: a running share's lease ran out unrenewed; its handler is cancelled",
			"schedule", k.schedule, "instance", s.name, "moment", time.UnixMilli(k.moment).UTC(), "worker", k.worker, "error", err)
		h.cancel(ErrShareLost)
	default:
		s.log.Warn("schedule: renewing a running share's lease failed; retrying",
			"schedule", k.schedule, "instance", s.name, "worker", k.worker, "error", err)
	}
}

// sweeps looks, every leaseTick, for shares whose lease ran out within the
// last HeartbeatTTL and takes over those of this instance's schedules.
func (s *Scheduler) sweeps(ctx context.Context) {
	defer s.loops.Done()
	for {
		if clock.Sleep(ctx, s.clk, s.leaseTick()) != nil {
			return
		}
		// As in heartbeats: run to the end, so nothing commits after Stop.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.ttl)
		if err := s.sweep(ctx, sctx); err != nil {
			s.log.Warn("schedule: looking for shares to take over failed", "instance", s.name, "error", err)
		}
		cancel()
	}
}

// orphan is a share whose lease ran out.
type orphan struct {
	schedule string
	moment   int64
	worker   int
}

// sweep takes over the orphans of this instance's schedules: at most as
// many per schedule as it has runners, so that several live instances share
// a dead one's load. loopCtx tells whether Stop began; ctx runs the
// statements.
func (s *Scheduler) sweep(loopCtx, ctx context.Context) error {
	now := s.clk.Now()
	q := s.sql.Orphans.Call(now, s.ttl)
	rows, err := s.db.QueryContext(ctx, q.SQL, q.Args...)
	if err != nil {
		return err
	}
	var found []orphan
	for rows.Next() {
		var o orphan
		if err := rows.Scan(&o.schedule, &o.moment, &o.worker); err != nil {
			rows.Close()
			return err
		}
		found = append(found, o)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	taken := map[string]int{}
	for _, o := range found {
		e := s.byName[o.schedule]
		if e == nil || taken[e.name] >= e.runners() || (e.skipBusy && e.running.Load() > 0) {
			continue
		}
		runs, err := s.takeOver(loopCtx, ctx, e, o, "schedule: took over a share whose lease ran out")
		if err != nil {
			return err
		}
		taken[e.name] += len(runs)
	}
	return nil
}

// takeOver claims orphan o of e, unless this instance runs it, and starts
// it; logged with msg. loopCtx tells whether Stop began; ctx runs the
// statements.
func (s *Scheduler) takeOver(loopCtx, ctx context.Context, e *entry, o orphan, msg string) ([]Run, error) {
	s.heldMu.Lock()
	_, mine := s.held[shareKey{o.schedule, o.moment, o.worker}]
	s.heldMu.Unlock()
	if mine {
		return nil, nil // this instance still runs it: a late renewal, not an orphan
	}
	at := time.UnixMilli(o.moment).In(e.loc)
	token := randomToken()
	var read dialect.Call
	if !s.sql.TakeOver.Returns() {
		read = s.sql.TakeOver.Read(token, o.schedule, at, o.worker)
	}
	runs, err := s.claim(ctx, e, at, s.sql.TakeOver.Call(s.name, token, s.clk.Now(), s.lease, o.schedule, at, o.worker), read)
	if err != nil {
		return nil, fmt.Errorf("take over share %d of schedule %q at %v: %w", o.worker, o.schedule, at, err)
	}
	for _, r := range runs {
		s.log.Info(msg, "schedule", e.name, "instance", s.name, "fired_at", at, "worker", r.Worker, "dealt_to", r.DealtTo)
	}
	s.startAll(loopCtx, e, runs, token)
	return runs, nil
}
