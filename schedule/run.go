package schedule

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/sqlinbox/sqlinbox/clock"
)

// member is one instance in a moment's membership.
type member struct {
	Instance string `json:"instance"`
	Runners  int    `json:"runners"`
}

// maxCatchUp bounds how many missed moments a late loop steps over to find
// the latest passed one before it gives up and waits for the next.
const maxCatchUp = 10000

// Start writes this instance's heartbeats for every schedule, so that a
// moment that comes after Start returns includes this instance, then starts
// the heartbeat and moment loops. ctx bounds the registration only; the
// Scheduler runs until Stop.
func (s *Scheduler) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != 0 {
		return errors.New("schedule: Start called twice, or after Stop")
	}
	if err := s.beatOnce(ctx); err != nil {
		return fmt.Errorf("schedule: instance %q: register heartbeats (did migrations.ApplySchedules run?): %w", s.name, err)
	}
	s.state = 1
	loopCtx, stopLoops := context.WithCancel(context.Background())
	runsCtx, stopRuns := context.WithCancel(context.Background())
	s.stopLoops, s.stopRuns, s.runsCtx = stopLoops, stopRuns, runsCtx
	s.loops.Add(1 + len(s.entries))
	go s.heartbeats(loopCtx)
	for _, e := range s.entries {
		go s.loop(loopCtx, e)
	}
	return nil
}

// Stop ends the instance's part in every schedule: no moment fires after it
// begins, its heartbeats are deleted at once (so the next moment leaves it
// out), then it waits for running handlers to return. When ctx ends first, it
// cancels the handlers' contexts and returns ctx's error without waiting
// further. Stop on a Scheduler that never started does nothing.
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
	_, leaveErr := s.db.ExecContext(leaveCtx, s.sql.Leave, s.name)
	cancel()
	if leaveErr != nil {
		leaveErr = fmt.Errorf("schedule: instance %q: delete heartbeats: %w", s.name, leaveErr)
	}

	done := make(chan struct{})
	go func() { s.runs.Wait(); close(done) }()
	select {
	case <-done:
		s.stopRuns()
		return leaveErr
	case <-ctx.Done():
		s.stopRuns()
		return errors.Join(leaveErr, fmt.Errorf("schedule: instance %q: stop: runs still busy: %w", s.name, ctx.Err()))
	}
}

// crash ends the loops without leaving, as a dead process would: tests use it.
func (s *Scheduler) crash() {
	s.mu.Lock()
	started := s.state == 1
	s.state = 2
	s.mu.Unlock()
	if started {
		s.stopLoops()
		s.loops.Wait()
		s.stopRuns()
		s.runs.Wait()
	}
}

// beatOnce renews the heartbeat of every schedule of this instance.
func (s *Scheduler) beatOnce(ctx context.Context) error {
	now := s.clk.Now()
	for _, e := range s.entries {
		if _, err := s.db.ExecContext(ctx, s.sql.Beat, e.name, s.name, e.runners(), s.times.Arg(now, s.ttl)); err != nil {
			return fmt.Errorf("schedule %q: %w", e.name, err)
		}
	}
	return nil
}

// heartbeats renews this instance's heartbeats every Heartbeat and prunes
// old moments and long-expired heartbeats.
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
		if err := s.beatOnce(bctx); err != nil {
			s.log.Warn("schedule: heartbeat failed; this instance drops out of new moments if it keeps failing",
				"instance", s.name, "error", err)
		}
		now := s.clk.Now()
		keep := -MomentRetention * s.ttl
		if _, err := s.db.ExecContext(bctx, s.sql.PruneMoments, s.times.Arg(now, keep)); err != nil {
			s.log.Warn("schedule: prune old moments failed", "instance", s.name, "error", err)
		}
		if _, err := s.db.ExecContext(bctx, s.sql.PruneBeats, s.times.Arg(now, keep)); err != nil {
			s.log.Warn("schedule: prune expired heartbeats failed", "instance", s.name, "error", err)
		}
		cancel()
	}
}

// loop waits for each moment of e and fires it.
func (s *Scheduler) loop(ctx context.Context, e *entry) {
	defer s.loops.Done()
	m := e.moments.next(s.clk.Now())
	for !m.IsZero() {
		if clock.Sleep(ctx, s.clk, m.Sub(s.clk.Now())) != nil {
			return
		}
		now := s.clk.Now()
		// A loop that fell behind runs only the latest passed moment.
		caught := false
		for range maxCatchUp {
			n := e.moments.next(m)
			if n.IsZero() || n.After(now) {
				caught = true
				break
			}
			m = n
		}
		switch {
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
			if err := s.fire(ctx, e, m); err != nil && ctx.Err() == nil {
				s.log.Error("schedule: moment not run", "schedule", e.name, "instance", s.name, "fired_at", m, "error", err)
			}
		}
		m = e.moments.next(m)
	}
}

// fire takes part in moment at of e: it writes the moment's row unless
// another instance did first, reads the row, and starts this instance's
// runs.
func (s *Scheduler) fire(ctx context.Context, e *entry, at time.Time) error {
	if e.skipBusy && e.running.Load() > 0 {
		s.log.Info("schedule: previous run still busy; moment skipped on this instance",
			"schedule", e.name, "instance", s.name, "fired_at", at)
		return nil
	}
	key := s.times.Encode(at)
	seen, err := s.members(ctx, e)
	if err != nil {
		return fmt.Errorf("read heartbeats: %w", err)
	}
	text, err := json.Marshal(seen)
	if err != nil {
		return err
	}
	res, err := s.db.ExecContext(ctx, s.sql.Claim, e.name, key, s.name, string(text))
	if err != nil {
		return fmt.Errorf("write moment: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("write moment: %w", err)
	}
	won := n == 1
	if !won && e.placement == One {
		return nil // another instance won the moment and runs it
	}
	members := seen
	if !won {
		var writer, stored string
		err := s.db.QueryRowContext(ctx, s.sql.Moment, e.name, key).Scan(&writer, &stored)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("moment row vanished after a conflicting insert (pruned? clocks far apart?)")
		}
		if err != nil {
			return fmt.Errorf("read moment: %w", err)
		}
		members = nil
		if err := json.Unmarshal([]byte(stored), &members); err != nil {
			return fmt.Errorf("moment written by %q holds a bad membership %q: %w", writer, stored, err)
		}
	}

	instance, offset, total := -1, 0, 0
	for i, mb := range members {
		if mb.Instance == s.name {
			instance = i
			offset = total
		}
		total += mb.Runners
	}
	base := Run{Schedule: e.name, FiredAt: at, Instance: instance, Instances: len(members), InstanceName: s.name}
	switch e.placement {
	case One:
		r := base
		r.Worker, r.Workers, r.Runner, r.Runners = 0, 1, 0, 1
		s.start(e, r)
	case EveryInstance, EveryWorker:
		if instance < 0 {
			s.log.Debug("schedule: this instance joined after the moment's membership was written; it takes part from the next moment",
				"schedule", e.name, "instance", s.name, "fired_at", at)
			return nil
		}
		runners := members[instance].Runners
		for i := range runners {
			r := base
			if e.placement == EveryInstance {
				r.Worker, r.Workers = instance, len(members)
			} else {
				r.Worker, r.Workers = offset+i, total
			}
			r.Runner, r.Runners = i, runners
			s.start(e, r)
		}
	}
	return nil
}

// members reads the live instances of e's schedule, ordered by name, with
// this instance always in: it is alive, it is writing.
func (s *Scheduler) members(ctx context.Context, e *entry) ([]member, error) {
	rows, err := s.db.QueryContext(ctx, s.sql.Members, e.name, s.times.Arg(s.clk.Now(), 0))
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

// start runs one share in its own goroutine.
func (s *Scheduler) start(e *entry, r Run) {
	s.runs.Add(1)
	e.running.Add(1)
	go func() {
		defer s.runs.Done()
		defer e.running.Add(-1)
		s.call(e, r)
	}()
}

// call runs the handler, logging its error or panic with the share.
func (s *Scheduler) call(e *entry, r Run) {
	attrs := func(extra ...any) []any {
		return append([]any{"schedule", r.Schedule, "fired_at", r.FiredAt, "worker", r.Worker, "workers", r.Workers,
			"instance", s.name, "instance_index", r.Instance, "instances", r.Instances, "runner", r.Runner, "runners", r.Runners}, extra...)
	}
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("schedule: handler panicked", attrs("panic", fmt.Sprint(p), "stack", string(debug.Stack()))...)
		}
	}()
	if err := e.handler(s.runsCtx, r); err != nil {
		s.log.Error("schedule: handler failed", attrs("error", err)...)
	}
}
