package dialect

import (
	"fmt"
	"time"
)

// A row's state is read from locked_until alone, against five cuts: now, a
// floor and a horizon (now plus a part of the queue's lease, and plus the
// lease), Waiting and Never. The SQL conditions and StateIn below are the one
// definition; every count and listing uses them.
const (
	StateAvailable = "available" // NULL, or at or before now
	StateHeld      = "held"      // after the floor, up to the horizon: in work under a lease
	StateDelayed   = "delayed"   // after now up to the floor, or after the horizon before Waiting: a retry's backoff, a delayed publish
	StateParked    = "parked"    // at Never or after: failed its last attempt
	StateWaiting   = "waiting"   // at Waiting, before Never: waits for its parents (see deps.go)
)

// StateIn is the state of a row whose locked_until is lu (set false for
// NULL), held rows being due after floor and up to horizon. With floor now
// every row due within the horizon is held; with horizon now, none is.
func StateIn(lu time.Time, set bool, now, floor, horizon time.Time) string {
	switch {
	case !set || !lu.After(now):
		return StateAvailable
	case lu.After(floor) && !lu.After(horizon):
		return StateHeld
	case lu.Before(Waiting):
		return StateDelayed
	case lu.Before(Never):
		return StateWaiting
	}
	return StateParked
}

// StateOf is StateIn with the floor at now: a row due within the horizon is
// held.
func StateOf(lu time.Time, set bool, now, horizon time.Time) string {
	return StateIn(lu, set, now, now, horizon)
}

// availableCond is the condition of an available row: lu is the
// locked_until column, now the SQL of the time.
func availableCond(lu, now string) string {
	return fmt.Sprintf("(%s IS NULL OR %s <= %s)", lu, lu, now)
}

// heldCond is the condition of a held row.
func heldCond(lu, now, horizon string) string {
	return fmt.Sprintf("(%s > %s AND %s <= %s)", lu, now, lu, horizon)
}

// delayedCond is the condition of a delayed row; with horizon now, of a
// row held or delayed.
func delayedCond(lu, horizon, waiting string) string {
	return fmt.Sprintf("(%s > %s AND %s < %s)", lu, horizon, lu, waiting)
}

// waitingCond is the condition of a row that waits for its parents.
func waitingCond(lu, waiting, never string) string {
	return fmt.Sprintf("(%s >= %s AND %s < %s)", lu, waiting, lu, never)
}

// parkedCond is the condition of a parked row.
func parkedCond(lu, never string) string {
	return fmt.Sprintf("%s >= %s", lu, never)
}

// ParkedSQL lists parked rows in id order.
type ParkedSQL struct{ text }

// $1 Never, $2 the group.
func (w inboxTable) parked() ParkedSQL {
	return ParkedSQL{w.text(fmt.Sprintf("SELECT %s FROM %s WHERE %s = $1%s ORDER BY %s", w.returning(), w.t.Name, w.t.LockedUntil, w.group(2), w.t.ID))}
}

// Call lists the parked rows of group.
func (s ParkedSQL) Call(group any) Call { return s.call(s.tm.Encode(Never), group) }

// CountSQL counts rows by state (see InboxSQL.Count).
type CountSQL struct{ text }

// $1 now, $2 Never, $3 the group, $4 Waiting: available, held or
// delayed, parked, waiting.
func (w inboxTable) count() CountSQL {
	lu, now := w.t.LockedUntil, w.tm.At(1)
	return CountSQL{w.text(fmt.Sprintf(`SELECT
	COALESCE(SUM(CASE WHEN %s THEN 1 ELSE 0 END), 0),
	COALESCE(SUM(CASE WHEN %s THEN 1 ELSE 0 END), 0),
	COALESCE(SUM(CASE WHEN %s THEN 1 ELSE 0 END), 0),
	COALESCE(SUM(CASE WHEN %s THEN 1 ELSE 0 END), 0)
FROM %s WHERE TRUE%s`, availableCond(lu, now), delayedCond(lu, now, "$4"), parkedCond(lu, "$2"), waitingCond(lu, "$4", "$2"), w.t.Name, w.group(3)))}
}

// Call counts the rows of group as they stand at now.
func (s CountSQL) Call(now time.Time, group any) Call {
	return s.call(s.tm.Arg(now, 0), s.tm.Encode(Never), group, s.tm.Encode(Waiting))
}
