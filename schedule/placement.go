package schedule

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// An operator may place a schedule otherwise than its code does, without a
// deploy: SetPlacement writes the placement into the registry's tables
// (migrations.ApplyRegistry), every instance reads it at each moment of the
// schedule, and ResetPlacement gives the schedule its code's placement
// back. The inbox command (schedule set-placement) and the dashboard's
// schedules page call them.

// ParsePlacement reads a placement as String writes it: "one",
// "every-instance" or "every-worker".
func ParsePlacement(s string) (Placement, error) {
	for _, p := range []Placement{One, EveryInstance, EveryWorker} {
		if s == p.String() {
			return p, nil
		}
	}
	return 0, fmt.Errorf("%w: placement %q; use one, every-instance or every-worker", ErrInvalid, s)
}

// SetPlacement places schedule name as p on every instance that runs it,
// over the placement its code gives, from its next moment on, until
// ResetPlacement. An EveryWorker placement deals each instance as many
// shares as its heartbeat last told: an instance whose code places the
// schedule otherwise tells its workers from its first heartbeat after it
// ran a moment under the new placement, and has one share until then.
func SetPlacement(ctx context.Context, db *sql.DB, name string, p Placement) error {
	if _, err := ParsePlacement(p.String()); err != nil {
		return fmt.Errorf("schedule: set the placement of %q: %w", name, err)
	}
	d, err := dialect.Detect(db)
	if err != nil {
		return fmt.Errorf("schedule: %w", err)
	}
	q := d.Placements().Set.Call(name, p.String(), time.Now())
	if _, err := db.ExecContext(ctx, q.SQL, q.Args...); err != nil {
		return fmt.Errorf("schedule: set the placement of %q in %s: %w (did migrations.ApplyRegistry run?)", name, dialect.SchedulePlacements, err)
	}
	return nil
}

// ResetPlacement removes the placement SetPlacement gave schedule name:
// from its next moment on, it runs as its code places it. It reports
// whether there was one.
func ResetPlacement(ctx context.Context, db *sql.DB, name string) (bool, error) {
	d, err := dialect.Detect(db)
	if err != nil {
		return false, fmt.Errorf("schedule: %w", err)
	}
	q := d.Placements().Clear.Call(name)
	res, err := db.ExecContext(ctx, q.SQL, q.Args...)
	if err != nil {
		return false, fmt.Errorf("schedule: reset the placement of %q in %s: %w (did migrations.ApplyRegistry run?)", name, dialect.SchedulePlacements, err)
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// Override is a placement an operator set over a schedule's code.
type Override struct {
	Placement Placement
	SetAt     time.Time
}

// Overrides reads every placement set with SetPlacement, by schedule. A
// database without the registry's tables has none.
func Overrides(ctx context.Context, db *sql.DB) (map[string]Override, error) {
	d, err := dialect.Detect(db)
	if err != nil {
		return nil, fmt.Errorf("schedule: %w", err)
	}
	out := map[string]Override{}
	err = each(ctx, db, d.Placements().List.Call(), func(scan func(...any) error) error {
		var name, text string
		var at int64
		if err := scan(&name, &text, &at); err != nil {
			return err
		}
		if p, err := ParsePlacement(text); err == nil {
			out[name] = Override{Placement: p, SetAt: time.UnixMilli(at)}
		}
		return nil
	})
	if dialect.IsMissingTable(d, err) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("schedule: read the placements in %s: %w", dialect.SchedulePlacements, err)
	}
	return out, nil
}

// placementOf is e's placement for its moment now: the one an operator
// set, else its code's. Without the registry's tables no operator can have
// set one, and the table is not asked again for a heartbeat.
func (s *Scheduler) placementOf(ctx context.Context, e *entry) Placement {
	now := s.clk.Now()
	if now.UnixNano() < s.noOverrides.Load() {
		return e.placement
	}
	q := s.placements.Get.Call(e.name)
	var text string
	err := s.db.QueryRowContext(ctx, q.SQL, q.Args...).Scan(&text)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return e.placement
	case dialect.IsMissingTable(s.d, err):
		s.noOverrides.Store(now.Add(s.beat).UnixNano())
		return e.placement
	case err != nil:
		s.log.Warn("schedule: could not read the schedule's placement override; this instance takes the moment as its code places it",
			"schedule", e.name, "instance", s.name, "error", err)
		return e.placement
	}
	p, err := ParsePlacement(text)
	if err != nil {
		s.log.Warn("schedule: the schedule's placement override is unreadable; this instance takes the moment as its code places it",
			"schedule", e.name, "instance", s.name, "placement", text)
		return e.placement
	}
	return p
}
