package dialect

import "time"

// SchedulePlacements holds the placements operators set over the ones the
// schedules' code gives: one row per overridden schedule. It is a registry
// table (migrations.ApplyRegistry), beside the paused queues.
const SchedulePlacements = "sqlinbox_schedule_placements"

// PlacementSQL reads and writes the schedules' placement overrides.
type PlacementSQL struct {
	// Get reads a schedule's override: placement (no row when none).
	Get ScheduleNameSQL
	// Set writes a schedule's override, replacing one already there.
	Set PlacementSetSQL
	// Clear deletes a schedule's override: its code's placement holds again.
	Clear ScheduleNameSQL
	// List reads every override: schedule, placement, set_at.
	List PlainSQL
}

// Placements writes the overrides' statements. Times are Unix milliseconds,
// as in the registry.
func (d *Dialect) Placements() PlacementSQL {
	x := func(sql string) text { return d.text(sql, Times{}) }
	t := SchedulePlacements
	p := PlacementSQL{
		Get:   ScheduleNameSQL{x("SELECT placement FROM " + t + " WHERE schedule = $1")},
		Clear: ScheduleNameSQL{x("DELETE FROM " + t + " WHERE schedule = $1")},
		List:  PlainSQL{x("SELECT schedule, placement, set_at FROM " + t + " ORDER BY schedule")},
	}
	if d.Kind == MySQL {
		p.Set = PlacementSetSQL{x("INSERT INTO " + t + " (schedule, placement, set_at) VALUES ($1, $2, $3) " +
			"ON DUPLICATE KEY UPDATE placement = VALUES(placement), set_at = VALUES(set_at)")}
		return p
	}
	p.Set = PlacementSetSQL{x("INSERT INTO " + t + " (schedule, placement, set_at) VALUES ($1, $2, $3) " +
		"ON CONFLICT (schedule) DO UPDATE SET placement = excluded.placement, set_at = excluded.set_at")}
	return p
}

// ScheduleNameSQL is a statement on one schedule's row.
type ScheduleNameSQL struct{ text }

// Call runs it for schedule.
func (s ScheduleNameSQL) Call(schedule string) Call { return s.call(schedule) }

// PlacementSetSQL writes an override.
type PlacementSetSQL struct{ text }

// Call places schedule as placement (its String), set at at.
func (s PlacementSetSQL) Call(schedule, placement string, at time.Time) Call {
	return s.call(schedule, placement, at.UnixMilli())
}
