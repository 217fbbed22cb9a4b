package dialect

// Read-only statements for operators (the dashboard): what the lock and
// schedule tables hold now. Times come back as the tables keep them; the
// callers decode them with Times.

// LockPlaces lists the held places of every lock: namespace, name, slot,
// fence, expires_at, for holds not expired at $1 (Times.Encode of now, in
// the lock table's encoding: timestamptz on Postgres, Unix milliseconds on
// SQLite).
func (d *Dialect) LockPlaces() string {
	return d.Rebind(`SELECT namespace, name, slot, fence, expires_at FROM ` + LockTable + `
WHERE slot >= 0 AND expires_at > $1 ORDER BY namespace, name, slot LIMIT 1000`)
}

// ScheduleInspect lists a schedule table's rows, newest moments first.
type ScheduleInspect struct {
	// Beats: schedule, instance, runners, expires_at, spec, placement,
	// next_at, runs, failures, last_error ("" when none), last_error_at.
	Beats string
	// Moments: schedule, fired_at, writer, members; the latest $1.
	Moments string
	// Shares: schedule, moment (Unix ms), worker, workers, dealt_to,
	// holder ("" when unclaimed), locked_until, done_at, error (NULL while
	// not done or when it succeeded); the latest $1.
	Shares string
}

// ScheduleInspect writes the statements of ScheduleInspect.
func (d *Dialect) ScheduleInspect() ScheduleInspect {
	return ScheduleInspect{
		Beats: `SELECT schedule, instance, runners, expires_at, spec, placement, next_at, runs, failures, COALESCE(last_error, ''), last_error_at
FROM ` + ScheduleHeartbeats + ` ORDER BY schedule, instance LIMIT 1000`,
		Moments: d.Rebind(`SELECT schedule, fired_at, writer, members FROM ` + ScheduleMoments + ` ORDER BY fired_at DESC, schedule LIMIT $1`),
		Shares: d.Rebind(`SELECT schedule, moment, worker, workers, dealt_to, COALESCE(holder, ''), locked_until, done_at, error FROM ` + ScheduleShares + `
ORDER BY moment DESC, schedule, worker LIMIT $1`),
	}
}
