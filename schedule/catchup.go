package schedule

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// A schedule with CatchUp runs the moments that every instance missed. At
// Start, and after a moment this instance could not write or reached too
// late, it reads the latest moment any instance wrote for the schedule and
// fires, oldest first, the moments after it that fall within the window:
// at most the option's count of them, the latest. Each is fired as a
// moment on time is, so the insert of its row stays the arbiter: instances
// that catch up at once run each moment once, its shares dealt among the
// instances live then. The prune keeps each schedule's latest moment, so
// the count starts from it however long every instance was away.

// catchUp is a schedule's CatchUp option.
type catchUp struct {
	window time.Duration
	most   int
}

// catchUp fires the moments of e at or before now that came after the
// latest moment written before before, within e's window and count, then
// latest (zero: none), the moment the loop woke for, unless it fired it
// already or it is more than a heartbeat TTL past. It logs its own errors.
func (s *Scheduler) catchUp(ctx context.Context, e *entry, now, before, latest time.Time) error {
	err := s.catchUpMoments(ctx, e, now, before, latest)
	if err != nil {
		s.log.Error("schedule: catching up missed moments stopped; tried again at the next moment",
			"schedule", e.name, "instance", s.name, "error", err)
	}
	return err
}

func (s *Scheduler) catchUpMoments(ctx context.Context, e *entry, now, before, latest time.Time) error {
	last, err := s.lastMoment(ctx, e, before)
	if err != nil {
		return fmt.Errorf("read the latest moment in %s: %w", dialect.ScheduleMoments, err)
	}
	if err := s.takeOverUnfinished(ctx, e, now.Add(-e.catchUp.window), now); err != nil {
		return err
	}
	var missed []time.Time
	if !last.IsZero() { // a schedule that never ran has missed nothing
		after := last
		if from := now.Add(-e.catchUp.window); after.Before(from) {
			after = from.Add(-time.Nanosecond) // a moment at the window's start is in
		}
		missed = latestMoments(e.moments, after, now, e.catchUp.most)
		if first := e.moments.next(last); !first.IsZero() && !first.After(now) && (len(missed) == 0 || first.Before(missed[0])) {
			until := now
			if len(missed) > 0 {
				until = missed[0]
			}
			s.log.Warn("schedule: missed moments before the catch-up window, or beyond its count, are not run",
				"schedule", e.name, "instance", s.name, "from", first, "until", until,
				"window", e.catchUp.window, "most", e.catchUp.most)
		}
		if len(missed) > 0 {
			s.log.Info("schedule: catching up missed moments", "schedule", e.name, "instance", s.name,
				"moments", len(missed), "first", missed[0], "last", missed[len(missed)-1])
		}
	}
	if !latest.IsZero() && now.Sub(latest) <= s.ttl && (len(missed) == 0 || missed[len(missed)-1].Before(latest)) {
		missed = append(missed, latest)
	}
	for _, m := range missed {
		if e.skipBusy && e.waitIdle(ctx) != nil {
			return nil // stopping
		}
		if ctx.Err() != nil {
			return nil
		}
		if err := s.fire(ctx, e, m); err != nil {
			return fmt.Errorf("moment %v: %w", m, err)
		}
	}
	return nil
}

// takeOverUnfinished runs the shares of e's moments since from that are not
// done and whose lease ended, at most MaxCatchUp of them, oldest first:
// their runners went away with every other instance, longer ago than a
// sweep looks back.
func (s *Scheduler) takeOverUnfinished(ctx context.Context, e *entry, from, now time.Time) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.ttl)
	var found []orphan
	err := each(sctx, s.db, s.sql.Unfinished.Call(e.name, from, now, MaxCatchUp), func(scan func(...any) error) error {
		o := orphan{schedule: e.name}
		err := scan(&o.moment, &o.worker)
		found = append(found, o)
		return err
	})
	cancel()
	if err != nil {
		return fmt.Errorf("list the unfinished shares in %s: %w", dialect.ScheduleShares, err)
	}
	for _, o := range found {
		if e.skipBusy && e.waitIdle(ctx) != nil || ctx.Err() != nil {
			return nil // stopping
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.ttl)
		_, err := s.takeOver(ctx, sctx, e, o, "schedule: catching up a share left unfinished")
		cancel()
		if err != nil {
			return err
		}
	}
	return nil
}

// lastMoment reads the latest moment of e written before before; zero
// when there is none.
func (s *Scheduler) lastMoment(ctx context.Context, e *entry, before time.Time) (time.Time, error) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.ttl)
	defer cancel()
	q := s.sql.Last.Call(e.name, before)
	var v any
	if err := s.db.QueryRowContext(sctx, q.SQL, q.Args...).Scan(&v); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, err
	}
	at, _, err := s.times.Decode(v)
	return at, err
}

// latestMoments returns, oldest first, the latest most moments of ms after
// after and at or before now. It looks back from now over a span that grows
// fourfold until it holds most moments or reaches after, so an Every of a
// millisecond over a window of a day steps over a second of moments, not a
// day of them.
func latestMoments(ms moments, after, now time.Time, most int) []time.Time {
	reach := now.Sub(after)
	if reach <= 0 || most <= 0 {
		return nil
	}
	span := min(time.Second, reach)
	for {
		lo := now.Add(-span)
		if span >= reach {
			lo = after
		}
		var got []time.Time
		for m := ms.next(lo); !m.IsZero() && !m.After(now); m = ms.next(m) {
			if len(got) == most {
				copy(got, got[1:])
				got = got[:most-1]
			}
			got = append(got, m)
		}
		if len(got) == most || span >= reach {
			return got
		}
		if span > reach/4 {
			span = reach
		} else {
			span *= 4
		}
	}
}

// ended counts a run of e out, and wakes a catch-up waiting for e's runs
// to end (SkipWhileBusy).
func (e *entry) ended() {
	e.idleMu.Lock()
	defer e.idleMu.Unlock()
	if e.running.Add(-1) == 0 && e.idle != nil {
		close(e.idle)
		e.idle = nil
	}
}

// waitIdle waits until no run of e is busy on this instance, or ctx ends.
func (e *entry) waitIdle(ctx context.Context) error {
	e.idleMu.Lock()
	if e.running.Load() == 0 {
		e.idleMu.Unlock()
		return nil
	}
	if e.idle == nil {
		e.idle = make(chan struct{})
	}
	idle := e.idle
	e.idleMu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
