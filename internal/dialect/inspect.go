package dialect

import (
	"fmt"
	"strings"
	"time"
)

// Read-only statements for operators (the dashboard): what the lock and
// schedule tables hold now. Times come back as the tables keep them; the
// callers decode them with Times.

// LockPlacesSQL lists the held places of every lock: namespace, name, slot,
// fence, expires_at.
type LockPlacesSQL struct{ text }

// Call lists the holds not expired at now (written as the lock table keeps
// it: timestamptz on Postgres, Unix milliseconds on SQLite).
func (s LockPlacesSQL) Call(now time.Time) Call {
	if s.kind == SQLite {
		return s.call(now.UnixMilli())
	}
	return s.call(now)
}

// LockPlaces writes the statement of LockPlacesSQL.
func (d *Dialect) LockPlaces() LockPlacesSQL {
	return LockPlacesSQL{d.text(`SELECT namespace, name, slot, fence, expires_at FROM `+LockTable+`
WHERE slot >= 0 AND expires_at > $1 ORDER BY namespace, name, slot LIMIT 1000`, Times{})}
}

// ScheduleInspect lists a schedule table's rows, newest moments first.
type ScheduleInspect struct {
	// Beats: schedule, instance, runners, expires_at, spec, placement,
	// next_at, runs, failures, last_error ("" when none), last_error_at.
	Beats PlainSQL
	// Moments: schedule, fired_at, writer, members; the latest few.
	Moments LimitSQL
	// Shares: schedule, moment (Unix ms), worker, workers, dealt_to,
	// holder ("" when unclaimed), locked_until, done_at, error (NULL while
	// not done or when it succeeded); the latest few.
	Shares LimitSQL
}

// LimitSQL lists the latest rows of a table.
type LimitSQL struct{ text }

// Call lists at most limit rows.
func (s LimitSQL) Call(limit int) Call { return s.call(limit) }

// ScheduleInspect writes the statements of ScheduleInspect.
func (d *Dialect) ScheduleInspect() ScheduleInspect {
	x := func(sql string) text { return d.text(sql, Times{}) }
	return ScheduleInspect{
		Beats: PlainSQL{x(`SELECT schedule, instance, runners, expires_at, spec, placement, next_at, runs, failures, COALESCE(last_error, ''), last_error_at
FROM ` + ScheduleHeartbeats + ` ORDER BY schedule, instance LIMIT 1000`)},
		Moments: LimitSQL{x(`SELECT schedule, fired_at, writer, members FROM ` + ScheduleMoments + ` ORDER BY fired_at DESC, schedule LIMIT $1`)},
		Shares: LimitSQL{x(`SELECT schedule, moment, worker, workers, dealt_to, COALESCE(holder, ''), locked_until, done_at, error FROM ` + ScheduleShares + `
ORDER BY moment DESC, schedule, worker LIMIT $1`)},
	}
}

// QueueRowsSQL reads every row of an inbox table, or of one group, in id
// order, for a test to look at: id, locked_until, group, attempts,
// last_error (NULL where the table has no such column).
type QueueRowsSQL struct{ text }

// QueueRows writes QueueRowsSQL for t ($1 the group, NULL for every row).
func (d *Dialect) QueueRows(t Table) QueueRowsSQL {
	cols := []string{t.ID, t.LockedUntil, or(t.Group, "NULL"), or(t.Attempts, "NULL"), or(t.LastError, "NULL")}
	where := d.isNull(1)
	if t.Group != "" {
		where = fmt.Sprintf("(%s OR %s = $1)", where, t.Group)
	}
	return QueueRowsSQL{d.text(fmt.Sprintf("SELECT %s FROM %s WHERE %s ORDER BY %s", strings.Join(cols, ", "), t.Name, where, t.ID), Times{})}
}

// Call reads the rows of group ("" for every row).
func (s QueueRowsSQL) Call(group string) Call { return s.call(nullable(group)) }
