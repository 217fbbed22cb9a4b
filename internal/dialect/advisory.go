package dialect

import (
	"fmt"
	"time"
)

// The advisory form's statements (Postgres), each text beside its Call.

// LockAvailableSQL walks and locks available rows (see
// InboxSQL.LockAvailable).
type LockAvailableSQL struct {
	text
	limited bool // it returns no more rows than the limit (MySQL)
}

// $1 now, $2 the limit, $3 the group, $4 the lock class, $5 the id after
// which the walk starts, $6 the most rows it tries, $7 the priority after
// which it starts.
//
// A recursive walk, one row a step: each step reads the next available id
// above the last (a primary-key probe) and tries its lock in the step's
// select list, which runs once for each row the step returns and for no
// other; the walk stops at the limit. Every row a step returns is in the
// result, so every lock taken is seen by the caller and none can leak. No
// pg_locks read: that view takes every lock-manager partition lock, which
// costs more the busier the database is. With priorities each step reads
// the next row after (priority, id) on the (priority, id) index, a row
// comparison it serves as one probe: the column is NOT NULL (the table
// check asks for it), so the comparison never meets a NULL.
func (w inboxTable) lockAvailable() LockAvailableSQL {
	t := w.t
	pri, next := "0", fmt.Sprintf("%s > w.id", t.ID)
	if t.Priority != "" {
		pri = t.Priority + "::int"
		next = fmt.Sprintf("(%s, %s) > (w.pri, w.id)", t.Priority, t.ID)
	}
	return LockAvailableSQL{text: w.text(fmt.Sprintf(`WITH RECURSIVE walk(id, pri, locked, got, steps) AS (
	SELECT $5::bigint, $7::int, false, 0, 0
	UNION ALL
	SELECT n.id, n.pri, pg_try_advisory_lock($4::int, (n.id %% 4294967296)::bigint::bit(32)::int), w.got + w.locked::int, w.steps + 1
	FROM walk w CROSS JOIN LATERAL (
		SELECT %s AS id, %s AS pri FROM %s WHERE %s%s%s AND %s ORDER BY %s LIMIT 1
	) n
	WHERE w.got + w.locked::int < $2 AND w.steps < $6
)
SELECT id, locked, pri FROM walk WHERE steps > 0`,
		t.ID, pri, t.Name, w.limitCond(), w.available(1), w.group(3), next, w.claimOrder()))}
}

// Call walks the rows of group available at now after the row (afterPri,
// afterID) in claim order (math.MinInt32, math.MinInt64 to start; the
// priority is ignored where the table has none), under lock class class,
// until it holds limit or has tried try.
func (s LockAvailableSQL) Call(now time.Time, limit int, group any, class int32, afterID, afterPri int64, try int) Call {
	return s.call(s.tm.Arg(now, 0), limit, group, class, afterID, try, afterPri)
}

// Reach is the most rows a Call with limit and try returns: as many back
// mean the walk may go on past the last. Postgres tries up to try rows and
// returns each; MySQL returns at most limit, passing over the rows other
// sessions hold without returning them.
func (s LockAvailableSQL) Reach(limit, try int) int {
	if s.limited {
		return limit
	}
	return try
}

// RereadSQL reads locked rows again (see InboxSQL.Reread).
type RereadSQL struct {
	text
	inline bool // the ids are written out at the end of the text (MySQL)
}

// $1 the ids, $2 now. Where the table counts attempts it counts one,
// committed on its own on the session that holds the locks: a holder that
// dies has its attempt counted all the same.
func (w inboxTable) reread() RereadSQL {
	t := w.t
	if t.Attempts == "" {
		return RereadSQL{text: w.text(fmt.Sprintf("SELECT %s FROM %s WHERE %s = ANY($1) AND %s", w.returning(), t.Name, t.ID, w.available(2)))}
	}
	return RereadSQL{text: w.text(fmt.Sprintf("UPDATE %s SET %s = %s + 1 WHERE %s = ANY($1) AND %s RETURNING %s",
		t.Name, t.Attempts, t.Attempts, t.ID, w.available(2), w.returning()))}
}

// Call reads again the rows ids that are available at now.
func (s RereadSQL) Call(ids []int64, now time.Time) Call {
	if s.inline {
		return Call{SQL: s.sql + idList(ids), Args: s.call(s.tm.Arg(now, 0)).Args}
	}
	return s.call(ids, s.tm.Arg(now, 0))
}

// DeleteManySQL removes rows held by advisory locks (see
// InboxSQL.DeleteMany).
type DeleteManySQL struct {
	text
	inline string // where the ids are written out (MySQL): what follows them
}

// $1 the ids.
func (w inboxTable) deleteMany() DeleteManySQL {
	return DeleteManySQL{text: w.text(fmt.Sprintf("DELETE FROM %s WHERE %s = ANY($1::bigint[]) RETURNING %s", w.t.Name, w.t.ID, w.t.ID))}
}

// Call deletes rows ids.
func (s DeleteManySQL) Call(ids []int64) Call {
	if s.inline != "" {
		return Call{SQL: s.sql + idList(ids) + s.inline}
	}
	return s.call(ids)
}

// UnlockSQL releases advisory locks (see InboxSQL.Unlock).
type UnlockSQL struct {
	text
	inline bool // a RELEASE_LOCK is written out for each id (MySQL)
}

// $1 the lock class, $2 the ids.
func (w inboxTable) unlock() UnlockSQL {
	return UnlockSQL{text: w.text("SELECT pg_advisory_unlock($1::int, (id % 4294967296)::bigint::bit(32)::int) FROM unnest($2::bigint[]) AS u(id)")}
}

// Call releases the locks of rows ids under lock class class.
func (s UnlockSQL) Call(class int32, ids []int64) Call {
	if s.inline {
		return s.mysqlUnlock(class, ids)
	}
	return s.call(class, ids)
}

// unlockAll releases every advisory lock of the session (see
// InboxSQL.UnlockAll).
func (w inboxTable) unlockAll() PlainSQL {
	return PlainSQL{w.text("SELECT pg_advisory_unlock_all()")}
}
