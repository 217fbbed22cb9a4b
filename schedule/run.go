package schedule

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// member is one instance in a moment's membership.
type member struct {
	Instance string `json:"instance"`
	Runners  int    `json:"runners"`
}

// maxLateSteps bounds how many missed moments a late loop steps over to
// find the latest passed one before it gives up and waits for the next.
const maxLateSteps = 10000

// Start takes this instance's name and writes its heartbeats for every
// schedule, so that a moment that comes after Start returns includes this
// instance, then starts the heartbeat, sweep and moment loops. While
// another scheduler holds the name, Start waits: if that one renews its hold
// (it is alive), Start fails with ErrDuplicateInstance, within about a
// heartbeat; if its hold runs out (it died, and this is its restart under
// the same name), Start takes the name, within HeartbeatTTL. ctx bounds the
// registration only; the Scheduler runs until Stop.
func (s *Scheduler) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != 0 {
		return errors.New("schedule: Start called twice, or after Stop")
	}
	if s.d.Kind == dialect.Postgres {
		// A statement-cache clash behind a pooler would read below as a
		// missing migration.
		if _, err := dialect.CheckPool(ctx, s.db, "schedule: the scheduler's pool"); errors.Is(err, dialect.ErrTransactionPooling) {
			return err
		}
	}
	if err := s.holdName(ctx); err != nil {
		if errors.Is(err, ErrDuplicateInstance) {
			return err
		}
		return fmt.Errorf("schedule: instance %q: register heartbeats (did migrations.ApplySchedules run?): %w", s.name, err)
	}
	// Moments written from here on may count this instance in: a catch-up
	// fires them again, to claim its shares at once (catchup.go).
	s.started = s.clk.Now()
	if err := s.beatOnce(ctx); err != nil {
		return fmt.Errorf("schedule: instance %q: register heartbeats (did migrations.ApplySchedules run?): %w", s.name, err)
	}
	s.state = 1
	loopCtx, stopLoops := context.WithCancel(context.Background())
	runsCtx, stopRuns := context.WithCancel(context.Background())
	renewCtx, stopRenew := context.WithCancel(context.Background())
	s.stopLoops, s.stopRuns, s.stopRenew, s.runsCtx = stopLoops, stopRuns, stopRenew, runsCtx
	s.renewDone = make(chan struct{})
	s.loops.Add(2 + len(s.entries))
	go s.heartbeats(loopCtx)
	go s.sweeps(loopCtx)
	go s.renewals(renewCtx)
	for _, e := range s.entries {
		go s.loop(loopCtx, e)
	}
	return nil
}

// Stop ends the instance's part in every schedule: no moment fires or share
// is taken over after it begins, its heartbeats are deleted at once (so the
// next moment leaves it out), then it waits for running handlers to return,
// renewing their shares' leases meanwhile. When ctx ends first, it cancels
// the handlers' contexts and returns ctx's error without waiting further;
// the share of a handler that then returns an error is handed back, for
// another instance to run at its next sweep. Stop on a Scheduler that never
// started does nothing.
func (s *Scheduler) Stop(ctx context.Context) error {
	s.mu.Lock()
	if s.state != 1 {
		s.state = 2
		s.mu.Unlock()
		return nil
	}
	s.state = 2
	s.mu.Unlock()

	s.stopLoops()
	s.loops.Wait()

	// Leave even when ctx is already done: a row left behind would keep
	// this instance in every membership until its heartbeat expires.
	leaveCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.ttl)
	q := s.sql.Leave.Call(s.name)
	_, leaveErr := s.db.ExecContext(leaveCtx, q.SQL, q.Args...)
	if leaveErr == nil {
		q = s.sql.Unhold.Call(s.name, s.token)
		_, leaveErr = s.db.ExecContext(leaveCtx, q.SQL, q.Args...)
	}
	cancel()
	if leaveErr != nil {
		leaveErr = fmt.Errorf("schedule: instance %q: delete heartbeats: %w", s.name, leaveErr)
	}

	done := make(chan struct{})
	go func() { s.runs.Wait(); close(done) }()
	select {
	case <-done:
		s.stopRuns()
		s.stopRenew()
		<-s.renewDone
		return leaveErr
	case <-ctx.Done():
		s.stopRuns()
		s.stopRenew()
		<-s.renewDone
		return errors.Join(leaveErr, fmt.Errorf("schedule: instance %q: stop: runs still busy: %w", s.name, ctx.Err()))
	}
}

// holdName takes this instance's name for Start. While another scheduler's
// hold has it, Start waits, a third of a heartbeat at a time: a hold that is
// renewed meanwhile belongs to a live scheduler (ErrDuplicateInstance, within
// about a heartbeat); one that runs out belonged to a scheduler that died
// (a restart under a fixed name), and its name is taken once it expires.
func (s *Scheduler) holdName(ctx context.Context) error {
	var seen string
	for {
		err := s.hold(ctx)
		if !errors.Is(err, ErrDuplicateInstance) {
			return err
		}
		var until any
		q := s.sql.HoldUntil.Call(s.name)
		switch rerr := s.db.QueryRowContext(ctx, q.SQL, q.Args...).Scan(&until); {
		case errors.Is(rerr, sql.ErrNoRows):
			continue // released meanwhile
		case rerr != nil:
			return fmt.Errorf("read the hold on the instance name: %w", rerr)
		}
		now := fmt.Sprint(until)
		if seen != "" && now != seen {
			return err // renewed: a live scheduler has the name
		}
		seen = now
		if serr := clock.Sleep(ctx, s.clk, s.leaseTick()); serr != nil {
			return fmt.Errorf("%w (waiting to see whether it is alive: %w)", err, serr)
		}
	}
}

// hold takes or renews this scheduler's hold on its instance name.
func (s *Scheduler) hold(ctx context.Context) error {
	now := s.clk.Now()
	q := s.sql.Hold.Call(s.name, s.token, now, s.ttl)
	res, err := s.db.ExecContext(ctx, q.SQL, q.Args...)
	if err != nil {
		return fmt.Errorf("hold the instance name: %w", err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 && s.sql.HoldNew.SQL() != "" {
		// Hold only renews here (MySQL): the name may be nobody's yet.
		q := s.sql.HoldNew.Call(s.name, s.token, now, s.ttl)
		if res, err = s.db.ExecContext(ctx, q.SQL, q.Args...); err != nil {
			return fmt.Errorf("hold the instance name: %w", err)
		}
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("hold the instance name: %w", err)
	} else if n == 0 {
		return fmt.Errorf("%w: instance %q is held by another live scheduler; give each instance its own Instance option "+
			"(a scheduler that died frees its name when its heartbeat expires, within HeartbeatTTL %v)", ErrDuplicateInstance, s.name, s.ttl)
	}
	return nil
}

// beatOnce renews this instance's hold on its name and the heartbeat of
// every schedule of this instance, which also tells operators its next
// moment, runs and failures (no statement of their own).
func (s *Scheduler) beatOnce(ctx context.Context) error {
	if err := s.hold(ctx); err != nil {
		return err
	}
	now := s.clk.Now()
	for _, e := range s.entries {
		q := s.beatCall(e, now)
		if _, err := s.db.ExecContext(ctx, q.SQL, q.Args...); err != nil {
			return fmt.Errorf("schedule %q: %w", e.name, err)
		}
	}
	return nil
}

// heartbeats renews this instance's heartbeats every Heartbeat and prunes
// old moments, shares and long-expired heartbeats.
func (s *Scheduler) heartbeats(ctx context.Context) {
	defer s.loops.Done()
	for {
		if clock.Sleep(ctx, s.clk, s.beat) != nil {
			return
		}
		// The statements run to their end when Stop comes meanwhile (Stop
		// waits for this loop): a beat cut off by the stop's cancel, its
		// connection closed under it, could still commit on the server
		// after Stop's delete of the heartbeats and bring one back (seen in
		// CI: a heartbeat left after Stop). A beat that takes longer than the
		// heartbeats last would be of no use.
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.ttl)
		if err := s.beatOnce(bctx); errors.Is(err, ErrDuplicateInstance) {
			s.log.Error("schedule: another scheduler runs under this instance's name; its runs and this one's are mixed up until one stops",
				"instance", s.name, "error", err)
		} else if err != nil {
			s.log.Warn("schedule: heartbeat failed; this instance drops out of new moments if it keeps failing",
				"instance", s.name, "error", err)
		}
		now := s.clk.Now()
		keep := -MomentRetention * s.ttl
		if _, err := s.exec(bctx, s.sql.PruneMoments.Call(now, keep)); err != nil {
			s.log.Warn("schedule: prune old moments failed", "instance", s.name, "error", err)
		}
		if _, err := s.exec(bctx, s.sql.PruneShares.Call(now, keep)); err != nil {
			s.log.Warn("schedule: prune old shares failed", "instance", s.name, "error", err)
		}
		if _, err := s.exec(bctx, s.sql.PruneBeats.Call(now, keep)); err != nil {
			s.log.Warn("schedule: prune expired heartbeats failed", "instance", s.name, "error", err)
		}
		if _, err := s.exec(bctx, s.sql.PruneHolds.Call(now, keep)); err != nil {
			s.log.Warn("schedule: prune expired instance holds failed", "instance", s.name, "error", err)
		}
		cancel()
	}
}

// loop waits for each moment of e and fires it. A schedule with CatchUp
// first runs the moments every instance missed before this one started,
// and catches up again after a moment it could not write or reached too
// late (catchup.go).
func (s *Scheduler) loop(ctx context.Context, e *entry) {
	defer s.loops.Done()
	now := s.clk.Now()
	m := e.moments.next(now)
	behind := false
	if e.catchUp.window > 0 {
		behind = s.catchUp(ctx, e, now, s.started, time.Time{}) != nil
	}
	for !m.IsZero() {
		if clock.Sleep(ctx, s.clk, m.Sub(s.clk.Now())) != nil {
			return
		}
		now := s.clk.Now()
		// A loop that fell behind runs only the latest passed moment.
		caught := false
		for range maxLateSteps {
			n := e.moments.next(m)
			if n.IsZero() || n.After(now) {
				caught = true
				break
			}
			m = n
		}
		switch {
		case e.catchUp.window > 0 && (behind || !caught || now.Sub(m) > s.ttl):
			if !caught {
				m = time.Time{}
			}
			behind = s.catchUp(ctx, e, now, now, m) != nil
			m = e.moments.next(now)
			continue
		case !caught:
			s.log.Warn("schedule: fell far behind; skipping to the next moment",
				"schedule", e.name, "instance", s.name, "fired_at", m)
			m = e.moments.next(now)
			continue
		case now.Sub(m) > s.ttl:
			// Later than a heartbeat TTL: the others may have counted this
			// instance out, and the moment's row may be pruned.
			s.log.Warn("schedule: moment reached too late; skipped",
				"schedule", e.name, "instance", s.name, "fired_at", m, "late", now.Sub(m))
		default:
			if err := s.fire(ctx, e, m); err != nil {
				behind = true
				s.log.Error("schedule: moment not run", "schedule", e.name, "instance", s.name, "fired_at", m, "error", err)
			}
		}
		m = e.moments.next(m)
	}
}

// fire takes part in moment at of e: it writes the moment's row and deals
// its shares unless another instance did first, then claims the shares
// dealt to this instance and runs them.
func (s *Scheduler) fire(ctx context.Context, e *entry, at time.Time) error {
	// As in heartbeats: the statements run to their end when Stop comes
	// meanwhile, so none commits after Stop returned; shares claimed after
	// Stop began are handed back, not run.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.ttl)
	defer cancel()
	placement := s.placementOf(sctx, e)
	e.effective.Store(int32(placement))
	skip := e.skipBusy && e.running.Load() > 0
	if skip && placement == One {
		s.log.Info("schedule: previous run still busy; moment skipped on this instance",
			"schedule", e.name, "instance", s.name, "fired_at", at)
		return nil // another instance may win the moment and run it
	}
	if err := s.deal(sctx, e, at, placement); err != nil {
		return err
	}
	if skip {
		if _, err := s.exec(sctx, s.sql.Skip.Call(e.name, at, s.name)); err != nil {
			return fmt.Errorf("skip this instance's shares: %w", err)
		}
		s.log.Info("schedule: previous run still busy; moment skipped on this instance",
			"schedule", e.name, "instance", s.name, "fired_at", at)
		return nil
	}
	token := randomToken()
	var read dialect.Call
	if !s.sql.TakeDealt.Returns() {
		read = s.sql.TakeDealt.Read(token, e.name, at)
	}
	runs, err := s.claim(sctx, e, at, s.sql.TakeDealt.Call(s.name, token, s.clk.Now(), s.lease, e.name, at), read)
	if err != nil {
		return fmt.Errorf("claim this instance's shares: %w", err)
	}
	if len(runs) == 0 && placement != One {
		s.log.Debug("schedule: no share dealt to this instance (it joined after the moment's membership was written); it takes part from the next moment",
			"schedule", e.name, "instance", s.name, "fired_at", at)
	}
	s.startAll(ctx, e, runs, token)
	return nil
}

// deal writes the moment's row with the membership this instance sees and,
// if that insert wins, the moment's shares placed as placement, in one
// transaction: an instance
// that finds the row finds its shares too.
func (s *Scheduler) deal(ctx context.Context, e *entry, at time.Time, placement Placement) error {
	seen, err := s.members(ctx, e)
	if err != nil {
		return fmt.Errorf("read heartbeats: %w", err)
	}
	text, err := json.Marshal(seen)
	if err != nil {
		return err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("write moment: %w", err)
	}
	defer tx.Rollback()
	q := s.sql.Claim.Call(e.name, at, s.name, string(text), s.clk.Now())
	res, err := tx.ExecContext(ctx, q.SQL, q.Args...)
	if err != nil {
		return fmt.Errorf("write moment: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("write moment: %w", err)
	} else if n == 0 {
		return nil // another instance won the moment and dealt it
	}
	args := s.shares(e, at, seen, placement)
	if _, err := tx.ExecContext(ctx, s.d.DealShares(s.times, len(args)/10), args...); err != nil {
		return fmt.Errorf("deal the moment's shares: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("write moment: %w", err)
	}
	return nil
}

// shares are the parameters of DealShares for the moment at of e among
// members, placed as placement: for each share, where it falls, and a
// reservation of one lease for the instance it is dealt to.
func (s *Scheduler) shares(e *entry, at time.Time, members []member, placement Placement) []any {
	reserve := s.times.Arg(s.clk.Now(), s.lease)
	var args []any
	add := func(worker, workers, inst, runner, runners int) {
		args = append(args, e.name, at.UnixMilli(), worker, workers, members[inst].Instance, inst, len(members), runner, runners, reserve)
	}
	switch placement {
	case One:
		add(0, 1, slices.IndexFunc(members, func(m member) bool { return m.Instance == s.name }), 0, 1)
	case EveryInstance:
		for i := range members {
			add(i, len(members), i, 0, 1)
		}
	case EveryWorker:
		total := 0
		for _, m := range members {
			total += m.Runners
		}
		offset := 0
		for i, m := range members {
			for r := range m.Runners {
				add(offset+r, total, i, r, m.Runners)
			}
			offset += m.Runners
		}
	}
	return args
}

// members reads the live instances of e's schedule, ordered by name, with
// this instance always in: it is alive, it is writing.
func (s *Scheduler) members(ctx context.Context, e *entry) ([]member, error) {
	q := s.sql.Members.Call(e.name, s.clk.Now())
	rows, err := s.db.QueryContext(ctx, q.SQL, q.Args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []member
	self := false
	for rows.Next() {
		var m member
		if err := rows.Scan(&m.Instance, &m.Runners); err != nil {
			return nil, err
		}
		if m.Instance == s.name {
			self = true
			m.Runners = e.runners()
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if !self {
		out = append(out, member{Instance: s.name, Runners: e.runners()})
	}
	// Sorted in Go, not by the database: collations differ between engines.
	slices.SortFunc(out, func(a, b member) int { return strings.Compare(a.Instance, b.Instance) })
	return out, nil
}

// exec runs one statement on the pool.
func (s *Scheduler) exec(ctx context.Context, q dialect.Call) (sql.Result, error) {
	return s.db.ExecContext(ctx, q.SQL, q.Args...)
}

// claim runs TakeDealt or TakeOver and reads the shares it claimed as runs
// of the moment at; where the claim returns nothing (MySQL), read reads
// them once it ran.
func (s *Scheduler) claim(ctx context.Context, e *entry, at time.Time, q, read dialect.Call) ([]Run, error) {
	if read.SQL != "" {
		if _, err := s.db.ExecContext(ctx, q.SQL, q.Args...); err != nil {
			return nil, err
		}
		q = read
	}
	rows, err := s.db.QueryContext(ctx, q.SQL, q.Args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var runs []Run
	for rows.Next() {
		r := Run{Schedule: e.name, FiredAt: at, InstanceName: s.name}
		if err := rows.Scan(&r.Worker, &r.Workers, &r.DealtTo, &r.Instance, &r.Instances, &r.Runner, &r.Runners); err != nil {
			return nil, err
		}
		runs = append(runs, r)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(runs, func(a, b Run) int { return a.Worker - b.Worker })
	return runs, nil
}
