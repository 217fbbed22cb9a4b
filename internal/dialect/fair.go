package dialect

import (
	"fmt"
	"time"
)

// NextKey is the statement a fair subscription (inbox.FairBy) sends before
// each claim of one key: the least value of the key column t.Group above
// the last key served that has a row available now, or, past the last
// such value, the least of all (the round wraps). Each branch is one walk
// of the index on (key, id) that stops at its first available row, so a
// backlog of any size under one key costs a probe, not a scan; rows held
// at the front of a key (in work, or delayed) are stepped over one by one.
// It returns the key as text and 1 where the round wrapped.
func (d *Dialect) NextKey(t Table, tm Times) NextKeySQL {
	if t.Group == "" {
		return NextKeySQL{}
	}
	avail := availableCond(t.LockedUntil, tm.At(2))
	after := fmt.Sprintf("SELECT %[1]s AS k, 0 AS w FROM %[2]s WHERE %[1]s > $1 AND %[3]s ORDER BY %[1]s LIMIT 1", t.Group, t.Name, avail)
	first := fmt.Sprintf("SELECT %[1]s AS k, 1 AS w FROM %[2]s WHERE %[3]s ORDER BY %[1]s LIMIT 1", t.Group, t.Name, avail)
	// UNION ALL keeps its branches in order, and under the outer LIMIT
	// Postgres runs the second only when the first found nothing.
	return NextKeySQL{d.text(fmt.Sprintf("SELECT k, w FROM (%s) AS a UNION ALL SELECT k, w FROM (%s) AS b LIMIT 1", after, first), tm)}
}

// NextKeySQL finds the next key a fair subscription claims from (see
// NextKey).
type NextKeySQL struct{ text }

// Call asks for the first key after after (nil: from the first key) with
// a row available at now.
func (s NextKeySQL) Call(after any, now time.Time) Call {
	return s.call(after, s.tm.Arg(now, 0))
}
