package dialect

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// The settlements of an inbox table, each statement's text beside its
// Call. A claimed row is fenced on the lease its claim wrote; a row held by
// a lock (row-lock and advisory forms) by the lock alone.

// fence is the condition of row $1 whose lease is still $2.
func (w inboxTable) fence() string {
	return fmt.Sprintf("%s = $1 AND %s = $2", w.t.ID, w.t.LockedUntil)
}

// keepError sets the last error from parameter n, where the table keeps
// one.
func (w inboxTable) keepError(n int) string {
	if w.t.LastError == "" {
		return ""
	}
	return fmt.Sprintf(", %s = $%d", w.t.LastError, n)
}

// AckSQL deletes a claimed row fenced on its lease.
type AckSQL struct{ text }

// $1 the id, $2 the lease.
func (w inboxTable) ack() AckSQL {
	return AckSQL{w.text(fmt.Sprintf("DELETE FROM %s WHERE %s", w.t.Name, w.fence()))}
}

// Call deletes row id if its lease is still lease.
func (s AckSQL) Call(id int64, lease time.Time) Call {
	return s.call(id, s.tm.Encode(lease))
}

// Fenced is a claimed row and the lease its claim wrote (zero for a row
// held by a lock); Took, for a move into the history (HistorySQL), how
// long since its claim.
type Fenced struct {
	ID    int64
	Lease time.Time
	Took  time.Duration
}

// AckManySQL deletes claimed rows fenced on their leases (see
// InboxSQL.AckMany).
type AckManySQL struct {
	text
	mysql string // MySQL: what follows the (id, lease) pairs
}

// Postgres: $1 the ids, $2 the leases in microseconds since the epoch, as
// array literals. SQLite: $1 a JSON array of [id, lease] pairs, each looked
// up by id on the primary key, then fenced.
func (w inboxTable) ackMany() AckManySQL {
	t := w.t
	if w.d.Kind == Postgres {
		// A lease in microseconds is exact: the product is below 2^53.
		return AckManySQL{text: w.text(fmt.Sprintf("DELETE FROM %s AS t USING unnest($1::bigint[], $2::bigint[]) AS a(id, lease) WHERE t.%s = a.id AND t.%s = timestamptz 'epoch' + a.lease * interval '1 microsecond' RETURNING t.%s",
			t.Name, t.ID, t.LockedUntil, t.ID))}
	}
	return AckManySQL{text: w.text(fmt.Sprintf("DELETE FROM %s WHERE %s IN (SELECT t.%s FROM json_each($1) AS a JOIN %s AS t ON t.%s = json_extract(a.value, '$[0]') AND t.%s = json_extract(a.value, '$[1]')) RETURNING %s",
		t.Name, t.ID, t.ID, t.Name, t.ID, t.LockedUntil, t.ID))}
}

// Call deletes each row whose lease is still the one given.
func (s AckManySQL) Call(rows []Fenced) (Call, error) {
	if s.kind == MySQL {
		return s.mysqlCall(rows), nil
	}
	if s.kind == Postgres {
		// Two array literals, written here in one buffer each, where the
		// driver's arrays of int64 and time.Time take an allocation or
		// three per element.
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
type RetrySQL struct {
	text
	keepsError bool
}

// $1 the id, $2 the lease, $3 the time it is due, $4 the last error (where
// the table keeps one).
func (w inboxTable) retry() RetrySQL {
	return RetrySQL{w.text(fmt.Sprintf("UPDATE %s SET %s = %s%s WHERE %s", w.t.Name, w.t.LockedUntil, w.tm.At(3), w.keepError(4), w.fence())), w.t.LastError != ""}
}

// Call makes row id, if its lease is still lease, available at now+delay,
// keeping lastError ("" for none).
func (s RetrySQL) Call(id int64, lease, now time.Time, delay time.Duration, lastError string) Call {
	if !s.keepsError {
		return s.call(id, s.tm.Encode(lease), s.tm.Arg(now, delay))
	}
	return s.call(id, s.tm.Encode(lease), s.tm.Arg(now, delay), nullable(lastError))
}

// ParkSQL sets a claimed row aside for good, fenced.
type ParkSQL struct {
	text
	keepsError bool
}

// $1 the id, $2 the lease, $3 Never, $4 the last error (where the table
// keeps one).
func (w inboxTable) park() ParkSQL {
	return ParkSQL{w.text(fmt.Sprintf("UPDATE %s SET %s = $3%s WHERE %s", w.t.Name, w.t.LockedUntil, w.keepError(4), w.fence())), w.t.LastError != ""}
}

// Call parks row id if its lease is still lease, keeping lastError.
func (s ParkSQL) Call(id int64, lease time.Time, lastError string) Call {
	if !s.keepsError {
		return s.call(id, s.tm.Encode(lease), s.tm.Encode(Never))
	}
	return s.call(id, s.tm.Encode(lease), s.tm.Encode(Never), nullable(lastError))
}

// SnoozeSQL makes a claimed row available again later and gives back its
// attempt, fenced.
type SnoozeSQL struct{ text }

// $1 the id, $2 the lease, $3 the time it is due.
func (w inboxTable) snooze() SnoozeSQL {
	return SnoozeSQL{w.text(fmt.Sprintf("UPDATE %s SET %s = %s%s WHERE %s", w.t.Name, w.t.LockedUntil, w.tm.At(3), w.unbump(), w.fence()))}
}

// Call makes row id, if its lease is still lease, available at now+delay.
func (s SnoozeSQL) Call(id int64, lease, now time.Time, delay time.Duration) Call {
	return s.call(id, s.tm.Encode(lease), s.tm.Arg(now, delay))
}

// ExtendSQL moves a lease, fenced. It returns locked_until.
type ExtendSQL struct {
	text
	read text // MySQL: reads the lease back (see Returns)
}

// $1 the id, $2 the lease, $3 the new lease.
func (w inboxTable) extend() ExtendSQL {
	return ExtendSQL{text: w.text(fmt.Sprintf("UPDATE %s SET %s = %s WHERE %s RETURNING %s", w.t.Name, w.t.LockedUntil, w.tm.At(3), w.fence(), w.t.LockedUntil))}
}

// Call moves row id's lease, if it is still lease, to now+by.
func (s ExtendSQL) Call(id int64, lease, now time.Time, by time.Duration) Call {
	return s.call(id, s.tm.Encode(lease), s.tm.Arg(now, by))
}

// ReleaseSQL gives an unstarted row back with its attempt, fenced.
type ReleaseSQL struct{ text }

// $1 the id, $2 the lease.
func (w inboxTable) release() ReleaseSQL {
	return ReleaseSQL{w.text(fmt.Sprintf("UPDATE %s SET %s = NULL%s WHERE %s", w.t.Name, w.t.LockedUntil, w.unbump(), w.fence()))}
}

// Call gives row id back if its lease is still lease.
func (s ReleaseSQL) Call(id int64, lease time.Time) Call {
	return s.call(id, s.tm.Encode(lease))
}

// DeleteSQL removes a row held by a lock.
type DeleteSQL struct{ text }

// $1 the id.
func (w inboxTable) delete() DeleteSQL {
	return DeleteSQL{w.text(fmt.Sprintf("DELETE FROM %s WHERE %s = $1", w.t.Name, w.t.ID))}
}

// Call deletes row id.
func (s DeleteSQL) Call(id int64) Call { return s.call(id) }

// RetryLockedSQL is RetrySQL for a row held by a lock.
type RetryLockedSQL struct {
	text
	keepsError bool
}

// $1 the id, $2 the time it is due, $3 the last error (where the table
// keeps one).
func (w inboxTable) retryLocked() RetryLockedSQL {
	return RetryLockedSQL{w.text(fmt.Sprintf("UPDATE %s SET %s = %s%s WHERE %s = $1", w.t.Name, w.t.LockedUntil, w.tm.At(2), w.keepError(3), w.t.ID)), w.t.LastError != ""}
}

// Call makes row id available at now+delay, keeping lastError.
func (s RetryLockedSQL) Call(id int64, now time.Time, delay time.Duration, lastError string) Call {
	if !s.keepsError {
		return s.call(id, s.tm.Arg(now, delay))
	}
	return s.call(id, s.tm.Arg(now, delay), nullable(lastError))
}

// ParkLockedSQL is ParkSQL for a row held by a lock.
type ParkLockedSQL struct {
	text
	keepsError bool
}

// $1 the id, $2 Never, $3 the last error (where the table keeps one).
func (w inboxTable) parkLocked() ParkLockedSQL {
	return ParkLockedSQL{w.text(fmt.Sprintf("UPDATE %s SET %s = $2%s WHERE %s = $1", w.t.Name, w.t.LockedUntil, w.keepError(3), w.t.ID)), w.t.LastError != ""}
}

// Call parks row id, keeping lastError.
func (s ParkLockedSQL) Call(id int64, lastError string) Call {
	if !s.keepsError {
		return s.call(id, s.tm.Encode(Never))
	}
	return s.call(id, s.tm.Encode(Never), nullable(lastError))
}

// SnoozeLockedSQL is SnoozeSQL for a row held by a lock.
type SnoozeLockedSQL struct{ text }

// $1 the id, $2 the time it is due.
func (w inboxTable) snoozeLocked() SnoozeLockedSQL {
	return SnoozeLockedSQL{w.text(fmt.Sprintf("UPDATE %s SET %s = %s%s WHERE %s = $1", w.t.Name, w.t.LockedUntil, w.tm.At(2), w.unbump(), w.t.ID))}
}

// Call makes row id available at now+delay and gives back its attempt.
func (s SnoozeLockedSQL) Call(id int64, now time.Time, delay time.Duration) Call {
	return s.call(id, s.tm.Arg(now, delay))
}

// ReleaseLockedSQL gives back a row held by a lock, with its attempt.
type ReleaseLockedSQL struct{ text }

// $1 the id.
func (w inboxTable) releaseLocked() ReleaseLockedSQL {
	return ReleaseLockedSQL{w.text(fmt.Sprintf("UPDATE %s SET %s = NULL%s WHERE %s = $1", w.t.Name, w.t.LockedUntil, w.unbump(), w.t.ID))}
}

// Call gives row id back, available at once.
func (s ReleaseLockedSQL) Call(id int64) Call { return s.call(id) }
