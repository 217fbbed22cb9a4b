package dialect

import "time"

// The registry's statements, each a type whose Call takes its parameters
// by name and type (see Call). Times are written as Unix milliseconds.

// JoinSQL inserts an instance.
type JoinSQL struct{ text }

// Call inserts instance id of service at version, on host as process pid,
// started at started, its heartbeat at heartbeat every every, with why its
// pickups fall back to the poll ("" when they do not).
func (s JoinSQL) Call(id, service, version, host string, pid int, started, heartbeat time.Time, every time.Duration, pickupFallback string) Call {
	return s.call(id, service, version, host, pid, started.UnixMilli(), heartbeat.UnixMilli(), every.Milliseconds(), pickupFallback)
}

// JoinSubSQL inserts one subscription of an instance.
type JoinSubSQL struct{ text }

// Call inserts the subscription at position of instance: its name, its
// queue (table, group), its form, workers and lease, its table's column
// roles as JSON, and its limits per key as a JSON array ("" writes NULL:
// none).
func (s JoinSubSQL) Call(instance string, position int, name, table, group, form string, workers int, lease time.Duration, rolesJSON, limitsJSON string) Call {
	var limits any
	if limitsJSON != "" {
		limits = limitsJSON
	}
	return s.call(instance, position, name, table, group, form, workers, lease.Milliseconds(), rolesJSON, limits)
}

// BeatSQL moves an instance's heartbeat and returns the paused queues;
// where it returns nothing (MySQL), it is an update that matched one row
// or none, and Then reads the paused queues.
type BeatSQL struct {
	text
	then text
}

// Then reads the paused queues after the heartbeat where the heartbeat
// returns nothing; its SQL is "" where the heartbeat returns them.
func (s BeatSQL) Then() Call { return s.then.call() }

// Call moves instance's heartbeat to now.
func (s BeatSQL) Call(now time.Time, instance string) Call {
	return s.call(now.UnixMilli(), instance)
}

// InstanceSQL deletes what belongs to one instance (Leave, LeaveSubs).
type InstanceSQL struct{ text }

// Call deletes instance's rows.
func (s InstanceSQL) Call(instance string) Call { return s.call(instance) }

// BeforeSQL deletes rows older than a time (Forget, Prune).
type BeforeSQL struct{ text }

// Call deletes the rows before before.
func (s BeforeSQL) Call(before time.Time) Call { return s.call(before.UnixMilli()) }

// PlainSQL is a statement without parameters.
type PlainSQL struct{ text }

// Call is the statement, with no arguments.
func (s PlainSQL) Call() Call { return s.call() }

// AddMinuteSQL adds counts to a queue's minute.
type AddMinuteSQL struct{ text }

// Call adds to the minute starting at minuteMs (Unix ms) of queue (table,
// group) for outcome: handled handlings, totalUS and maxUS microseconds.
func (s AddMinuteSQL) Call(table, group string, minuteMs int64, outcome string, handled, totalUS, maxUS int64) Call {
	return s.call(table, group, minuteMs, outcome, handled, totalUS, maxUS)
}

// PauseSQL marks a queue paused.
type PauseSQL struct{ text }

// Call marks queue (table, group) paused at at.
func (s PauseSQL) Call(table, group string, at time.Time) Call {
	return s.call(table, group, at.UnixMilli())
}

// QueueSQL acts on one queue (Resume).
type QueueSQL struct{ text }

// Call acts on queue (table, group).
func (s QueueSQL) Call(table, group string) Call { return s.call(table, group) }

// MinutesSQL lists a queue's minutes.
type MinutesSQL struct{ text }

// Call lists the minutes of queue (table, group) from since on.
func (s MinutesSQL) Call(table, group string, since time.Time) Call {
	return s.call(table, group, since.UnixMilli())
}
