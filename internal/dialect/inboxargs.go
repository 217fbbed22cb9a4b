package dialect

import (
	"encoding/json"
	"strconv"
	"time"
)

// Call is a statement with its arguments in order, ready to run:
// db.ExecContext(ctx, c.SQL, c.Args...). The inbox statements hand out
// Calls only through a Call method with named, typed parameters, so a
// caller cannot put its arguments in the wrong order, nor encode a time
// the way the table does not keep it.
type Call struct {
	SQL  string
	Args []any
}

// text is one inbox statement and what writing its arguments needs.
type text struct {
	sql  string
	tm   Times
	kind Kind
}

// SQL is the statement's text, "" where this table or database has none.
func (s text) SQL() string { return s.sql }

func (s text) call(args ...any) Call { return Call{SQL: s.sql, Args: args} }

// text is a statement written with $n placeholders, in d's own.
func (d *Dialect) text(sql string, tm Times) text {
	return text{sql: d.Rebind(sql), tm: tm, kind: d.Kind}
}

// nullable is a text argument that is NULL when empty.
func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// ClaimLeaseSQL claims rows under a lease (see InboxSQL.ClaimLease).
type ClaimLeaseSQL struct{ text }

// Call claims up to limit (at most MaxClaim) available rows of group from
// id from on (math.MinInt64 for the whole table), leasing them until
// now+lease.
func (s ClaimLeaseSQL) Call(now time.Time, lease time.Duration, limit int, group any, from int64) Call {
	return s.call(s.tm.Arg(now, lease), s.tm.Arg(now, 0), limit, group, from)
}

// ClaimBlockSQL claims rows of one block of ids (see InboxSQL.ClaimBlock).
type ClaimBlockSQL struct{ text }

// Call claims up to limit available rows of group with ids from from up to
// below to, leasing them until now+lease.
func (s ClaimBlockSQL) Call(now time.Time, lease time.Duration, limit int, group any, from, to int64) Call {
	return s.call(s.tm.Arg(now, lease), s.tm.Arg(now, 0), limit, group, from, to)
}

// TicketSQL takes a block of ids (see InboxSQL.Ticket).
type TicketSQL struct{ text }

// Call takes the next block number, at least least.
func (s TicketSQL) Call(least int64) Call { return s.call(least) }

// ClaimHoldSQL takes one row for the row-lock form (see InboxSQL.ClaimHold).
type ClaimHoldSQL struct{ text }

// Call takes the first available row of group from id from on, leasing it
// until now+gap.
func (s ClaimHoldSQL) Call(now time.Time, gap time.Duration, group any, from int64) Call {
	return s.call(s.tm.Arg(now, gap), s.tm.Arg(now, 0), nil, group, from)
}

// HoldOneSQL locks the row ClaimHold took (see InboxSQL.HoldOne).
type HoldOneSQL struct{ text }

// Call locks row id if it still has the lease ClaimHold wrote.
func (s HoldOneSQL) Call(id int64, lease time.Time) Call {
	return s.call(id, s.tm.Encode(lease))
}

// SelectAvailableSQL reads the first available row (see
// InboxSQL.SelectAvailable).
type SelectAvailableSQL struct{ text }

// Locking is the statement with a lock clause appended.
func (s SelectAvailableSQL) Locking(clause string) SelectAvailableSQL {
	s.sql += " " + clause
	return s
}

// Call reads the first row of group available at now, from id from on.
func (s SelectAvailableSQL) Call(now time.Time, group any, from int64) Call {
	return s.call(s.tm.Arg(now, 0), group, from)
}

// LockAvailableSQL walks and locks available rows (see
// InboxSQL.LockAvailable).
type LockAvailableSQL struct{ text }

// Call walks the rows of group available at now after the row (afterPri,
// afterID) in claim order (math.MinInt32, math.MinInt64 to start; the
// priority is ignored where the table has none), under lock class class,
// until it holds limit or has tried try.
func (s LockAvailableSQL) Call(now time.Time, limit int, group any, class int32, afterID, afterPri int64, try int) Call {
	return s.call(s.tm.Arg(now, 0), limit, group, class, afterID, try, afterPri)
}

// RereadSQL reads locked rows again (see InboxSQL.Reread).
type RereadSQL struct{ text }

// Call reads again the rows ids that are available at now.
func (s RereadSQL) Call(ids []int64, now time.Time) Call {
	return s.call(ids, s.tm.Arg(now, 0))
}

// AckSQL deletes a claimed row fenced on its lease.
type AckSQL struct{ text }

// Call deletes row id if its lease is still lease.
func (s AckSQL) Call(id int64, lease time.Time) Call {
	return s.call(id, s.tm.Encode(lease))
}

// Fenced is a claimed row and the lease its claim wrote.
type Fenced struct {
	ID    int64
	Lease time.Time
}

// AckManySQL deletes claimed rows fenced on their leases (see
// InboxSQL.AckMany).
type AckManySQL struct{ text }

// Call deletes each row whose lease is still the one given.
func (s AckManySQL) Call(rows []Fenced) (Call, error) {
	if s.kind == Postgres {
		// Two array literals, the leases in microseconds since the epoch:
		// written here in one buffer each, where the driver's arrays of
		// int64 and time.Time take an allocation or three per element
		// (see BENCHMARKS.md, "Changes").
		ids := make([]byte, 0, 2+len(rows)*20)
		fences := make([]byte, 0, 2+len(rows)*20)
		ids, fences = append(ids, '{'), append(fences, '{')
		for i, r := range rows {
			if i > 0 {
				ids, fences = append(ids, ','), append(fences, ',')
			}
			ids = strconv.AppendInt(ids, r.ID, 10)
			fences = strconv.AppendInt(fences, r.Lease.UnixMicro(), 10)
		}
		ids, fences = append(ids, '}'), append(fences, '}')
		return s.call(string(ids), string(fences)), nil
	}
	pairs := make([][2]any, len(rows))
	for i, r := range rows {
		pairs[i] = [2]any{r.ID, s.tm.Encode(r.Lease)}
	}
	arg, err := json.Marshal(pairs)
	if err != nil {
		return Call{}, err
	}
	return s.call(string(arg)), nil
}

// RetrySQL makes a claimed row available again later, fenced.
type RetrySQL struct{ text }

// Call makes row id, if its lease is still lease, available at now+delay,
// keeping lastError ("" for none).
func (s RetrySQL) Call(id int64, lease, now time.Time, delay time.Duration, lastError string) Call {
	return s.call(id, s.tm.Encode(lease), s.tm.Arg(now, delay), nullable(lastError))
}

// ParkSQL sets a claimed row aside for good, fenced.
type ParkSQL struct{ text }

// Call parks row id if its lease is still lease, keeping lastError.
func (s ParkSQL) Call(id int64, lease time.Time, lastError string) Call {
	return s.call(id, s.tm.Encode(lease), s.tm.Encode(Never), nullable(lastError))
}

// SnoozeSQL makes a claimed row available again later and gives back its
// attempt, fenced.
type SnoozeSQL struct{ text }

// Call makes row id, if its lease is still lease, available at now+delay.
func (s SnoozeSQL) Call(id int64, lease, now time.Time, delay time.Duration) Call {
	return s.call(id, s.tm.Encode(lease), s.tm.Arg(now, delay))
}

// ExtendSQL moves a lease, fenced. It returns locked_until.
type ExtendSQL struct{ text }

// Call moves row id's lease, if it is still lease, to now+by.
func (s ExtendSQL) Call(id int64, lease, now time.Time, by time.Duration) Call {
	return s.call(id, s.tm.Encode(lease), s.tm.Arg(now, by))
}

// ReleaseSQL gives an unstarted row back with its attempt, fenced.
type ReleaseSQL struct{ text }

// Call gives row id back if its lease is still lease.
func (s ReleaseSQL) Call(id int64, lease time.Time) Call {
	return s.call(id, s.tm.Encode(lease))
}

// DeleteSQL removes a row held by a lock.
type DeleteSQL struct{ text }

// Call deletes row id.
func (s DeleteSQL) Call(id int64) Call { return s.call(id) }

// DeleteManySQL removes rows held by advisory locks (see
// InboxSQL.DeleteMany).
type DeleteManySQL struct{ text }

// Call deletes rows ids.
func (s DeleteManySQL) Call(ids []int64) Call { return s.call(ids) }

// RetryLockedSQL is RetrySQL for a row held by a lock.
type RetryLockedSQL struct{ text }

// Call makes row id available at now+delay, keeping lastError.
func (s RetryLockedSQL) Call(id int64, now time.Time, delay time.Duration, lastError string) Call {
	return s.call(id, nil, s.tm.Arg(now, delay), nullable(lastError))
}

// ParkLockedSQL is ParkSQL for a row held by a lock.
type ParkLockedSQL struct{ text }

// Call parks row id, keeping lastError.
func (s ParkLockedSQL) Call(id int64, lastError string) Call {
	return s.call(id, nil, s.tm.Encode(Never), nullable(lastError))
}

// SnoozeLockedSQL is SnoozeSQL for a row held by a lock.
type SnoozeLockedSQL struct{ text }

// Call makes row id available at now+delay and gives back its attempt.
func (s SnoozeLockedSQL) Call(id int64, now time.Time, delay time.Duration) Call {
	return s.call(id, nil, s.tm.Arg(now, delay))
}

// ReleaseLockedSQL gives back a row held by a lock, with its attempt.
type ReleaseLockedSQL struct{ text }

// Call gives row id back, available at once.
func (s ReleaseLockedSQL) Call(id int64) Call { return s.call(id) }

// UnlockSQL releases advisory locks (see InboxSQL.Unlock).
type UnlockSQL struct{ text }

// Call releases the locks of rows ids under lock class class.
func (s UnlockSQL) Call(class int32, ids []int64) Call { return s.call(class, ids) }

// ParkedSQL lists parked rows in id order.
type ParkedSQL struct{ text }

// Call lists the parked rows of group.
func (s ParkedSQL) Call(group any) Call { return s.call(s.tm.Encode(Never), group) }

// CountSQL counts rows by state (see InboxSQL.Count).
type CountSQL struct{ text }

// Call counts the rows of group as they stand at now.
func (s CountSQL) Call(now time.Time, group any) Call {
	return s.call(s.tm.Arg(now, 0), s.tm.Encode(Never), group)
}

// UnparkSQL makes parked rows available again with no attempts.
type UnparkSQL struct{ text }

// Call unparks the rows ids of group.
func (s UnparkSQL) Call(ids []int64, group any) Call {
	return s.call(s.tm.Encode(Never), Of(s.kind).ListArg(ids), group)
}

// FloorSQL reads the least id of a group (see InboxSQL.Floor).
type FloorSQL struct{ text }

// Call reads the least id of group at or above from.
func (s FloorSQL) Call(from int64, group any) Call { return s.call(from, group) }
