package dialect

import (
	"fmt"
	"time"
)

// The claims of an inbox table, each statement's text beside its Call.

// claimable is the FROM ... ORDER BY of the rows a claim may take: those
// meeting cond (a condition and AND, or ""), available at the time in
// parameter now, of the group in parameter group, at or above the resume
// point in parameter from where claims take one (see claimOrder).
func (w inboxTable) claimable(now, group, from int, cond string) string {
	resume := ""
	if w.resumes() {
		resume = w.from(from)
	}
	return fmt.Sprintf("FROM %s WHERE %s%s%s%s%s ORDER BY %s", w.t.Name, resume, cond, w.limitCond(), w.available(now), w.group(group), w.claimOrder())
}

// claimUpdate leases the rows of where (a claimable), at most parameter 3
// of them, until the time in parameter 1, counting their attempt.
func (w inboxTable) claimUpdate(where string) string {
	t, lu := w.t, w.t.LockedUntil
	switch {
	case w.d.Kind == SQLite:
		// SQLite re-prepares a statement whose LIMIT is a bare parameter
		// each time its value changes (it plans for the value bound), and a
		// claim's limit is the number of free workers, which changes all
		// the time: an expression keeps the one plan.
		pick := fmt.Sprintf("SELECT %s %s LIMIT ($3 + 0)", t.ID, where)
		if w.t.Rate.On() {
			pick = w.rateCap(fmt.Sprintf("SELECT %s AS h, %s %s LIMIT ($3 + 0)", t.ID, w.rateCandidate(), where))
		}
		return fmt.Sprintf("UPDATE %s SET %s = %s%s WHERE %s IN (%s) RETURNING %s",
			t.Name, lu, w.tm.At(1), w.bump(), t.ID, pick, w.returning())
	case t.OneHeap:
		// On Postgres the limit that locks is written out (MaxClaim) and the
		// claim's own limit is applied over it: rows are locked as they are
		// pulled, so no more than $3 are. With a bare LIMIT $3 Postgres
		// costs the generic plan at a tenth of the table, never picks it,
		// and plans every claim again.
		//
		// The update finds the rows the select locked by their address (a
		// TID scan), not by a second probe of the primary key each: a
		// locked row's ctid cannot change under the lock. Only on one heap:
		// partitions and child tables number their ctids each on its own,
		// and the update would also take the rows of the others at the same
		// addresses.
		return fmt.Sprintf("UPDATE %s SET %s = %s%s WHERE ctid = ANY(ARRAY(%s)) RETURNING %s",
			t.Name, lu, w.tm.At(1), w.bump(), w.pgPick("ctid", where), w.returning())
	}
	return fmt.Sprintf("UPDATE %s SET %s = %s%s WHERE %s = ANY(ARRAY(%s)) RETURNING %s",
		t.Name, lu, w.tm.At(1), w.bump(), t.ID, w.pgPick(t.ID, where), w.returning())
}

// pgPick selects the handle (ctid or the id) of the rows a Postgres claim
// leases: the first $3 of where that it locks, less those over their
// rate's slots left (rateCap).
func (w inboxTable) pgPick(handle, where string) string {
	if !w.t.Rate.On() {
		cols := handle
		if handle != w.t.ID {
			cols += ", " + w.t.ID
		}
		return fmt.Sprintf("SELECT %s FROM (SELECT %s %s LIMIT %d%s) AS c LIMIT $3", handle, cols, where, MaxClaim, w.d.SkipLocked())
	}
	return w.rateCap(fmt.Sprintf("SELECT * FROM (SELECT %s AS h, %s %s LIMIT %d%s) AS c LIMIT $3", handle, w.rateCandidate(), where, MaxClaim, w.d.SkipLocked()))
}

// rateCandidate is what a rate-limited claim reads of each row it may take
// (with its handle h): its place in claim order (o0, o1) and its rate's
// key (k).
func (w inboxTable) rateCandidate() string {
	pri := "0"
	if w.t.Priority != "" {
		pri = w.t.Name + "." + w.t.Priority
	}
	return fmt.Sprintf("%s AS o0, %s.%s AS o1, %s AS k", pri, w.t.Name, w.t.ID, w.d.keyText(w.t.Name+"."+w.t.Rate.Key))
}

// rateCap keeps of the candidates (h, o0, o1, k) the first of each key
// value in claim order, as many as its rate has slots left: a claim no
// longer takes rows of a value beyond its window's slots, which it took and
// gave back one by one (most rows a claim took at a window's opening). The
// window and the counts run over the candidates alone, at most $3 rows,
// and a value's first row is kept without a count: the claim's condition
// took only values with a slot left (a count for each row cost SQLite a
// tenth of a drain whose rate never bound).
func (w inboxTable) rateCap(candidates string) string {
	r := w.t.Rate
	return fmt.Sprintf(`SELECT h FROM (SELECT h, k, ROW_NUMBER() OVER (PARTITION BY k ORDER BY o0, o1) AS rn FROM (%s) AS c2) AS w
WHERE w.rn = 1 OR w.k IS NULL OR w.rn <= %d - (SELECT COUNT(*) FROM %s ls WHERE ls.limit_name = '%s' AND ls.key_value = w.k AND ls.holder <> '')`,
		candidates, r.Max, LimitTable, r.Name)
}

// ClaimLeaseSQL claims rows under a lease (see InboxSQL.ClaimLease).
type ClaimLeaseSQL struct {
	text
	resumes bool
}

// $1 the lease's end, $2 now, $3 the limit, $4 the group, $5 the resume
// point (where claims take one).
func (w inboxTable) claimLease() ClaimLeaseSQL {
	return ClaimLeaseSQL{w.text(w.claimUpdate(w.claimable(2, 4, 5, ""))), w.resumes()}
}

// Call claims up to limit (at most MaxClaim) available rows of group from
// id from on (math.MinInt64 for the whole table; ignored with priorities),
// leasing them until now+lease.
func (s ClaimLeaseSQL) Call(now time.Time, lease time.Duration, limit int, group any, from int64) Call {
	if !s.resumes {
		return s.call(s.tm.Arg(now, lease), s.tm.Arg(now, 0), limit, group)
	}
	return s.call(s.tm.Arg(now, lease), s.tm.Arg(now, 0), limit, group, from)
}

// ClaimBlockSQL claims rows of one block of ids (see InboxSQL.ClaimBlock).
type ClaimBlockSQL struct{ text }

// $1 the lease's end, $2 now, $3 the limit, $4 the group, $5 the resume
// point, $6 the end of the block (exclusive). Postgres tables with a block
// sequence and no priority column only (see ticket).
func (w inboxTable) claimBlock() ClaimBlockSQL {
	if w.t.Blocks == "" || !w.resumes() {
		return ClaimBlockSQL{}
	}
	below := fmt.Sprintf("%s < %s AND ", w.t.ID, w.d.bigint(6))
	return ClaimBlockSQL{w.text(w.claimUpdate(w.claimable(2, 4, 5, below)))}
}

// Call claims up to limit available rows of group with ids from from up to
// below to, leasing them until now+lease.
func (s ClaimBlockSQL) Call(now time.Time, lease time.Duration, limit int, group any, from, to int64) Call {
	return s.call(s.tm.Arg(now, lease), s.tm.Arg(now, 0), limit, group, from, to)
}

// TicketSQL takes a run of blocks of ids (see InboxSQL.Ticket).
type TicketSQL struct{ text }

// $1 the least block, $2 how many blocks in a row (at least 1). The
// sequence is set to the least block the claimer asks for when it is
// behind it (a table whose ids went up while no claim took blocks) or past
// every row (tickets taken as the last backlog ran out), so no block of
// rows is passed over; a ticket for several blocks then moves it past them
// in the same statement. Two claimers that take tickets at once may share
// blocks (a setting back as a backlog runs out, or a run of blocks set
// between another's nextval and its setval): they share those rows'
// claims, as without blocks.
func (w inboxTable) ticket() TicketSQL {
	if w.t.Blocks == "" || !w.resumes() {
		return TicketSQL{}
	}
	return TicketSQL{w.text(fmt.Sprintf("SELECT CASE WHEN v < $1::bigint OR v::numeric * %[3]d > (SELECT max(%[2]s) FROM %[4]s) THEN setval('%[1]s', $1::bigint + $2::bigint - 1) - $2::bigint + 1 "+
		"WHEN $2::bigint > 1 THEN setval('%[1]s', v + $2::bigint - 1) - $2::bigint + 1 ELSE v END FROM nextval('%[1]s') AS v",
		w.t.Blocks, w.t.ID, BlockIDs, w.t.Name))}
}

// Call takes the next run of n blocks (n at least 1), the first at least
// least, and returns the first.
func (s TicketSQL) Call(least, n int64) Call { return s.call(least, max(n, 1)) }

// ClaimHoldSQL takes one row for the row-lock form (see InboxSQL.ClaimHold).
type ClaimHoldSQL struct {
	text
	resumes bool
}

// $1 the lease's end, $2 now, $3 the group, $4 the resume point (where
// claims take one). One row, locked while its attempt is counted and its
// lease written, committed; the holder's transaction then locks it again
// by that lease, which no other claimer can take meanwhile. A holder that
// dies leaves the row held by that lease alone (a few seconds), with its
// attempt counted. Only where the table counts attempts.
func (w inboxTable) claimHold() ClaimHoldSQL {
	if w.t.Attempts == "" {
		return ClaimHoldSQL{}
	}
	return ClaimHoldSQL{w.text(fmt.Sprintf("UPDATE %s SET %s = %s%s WHERE %s = (SELECT %s %s LIMIT 1%s) RETURNING %s",
		w.t.Name, w.t.LockedUntil, w.tm.At(1), w.bump(), w.t.ID, w.t.ID, w.claimable(2, 3, 4, ""), w.d.SkipLocked(), w.returning())), w.resumes()}
}

// Call takes the first available row of group from id from on, leasing it
// until now+gap.
func (s ClaimHoldSQL) Call(now time.Time, gap time.Duration, group any, from int64) Call {
	if !s.resumes {
		return s.call(s.tm.Arg(now, gap), s.tm.Arg(now, 0), group)
	}
	return s.call(s.tm.Arg(now, gap), s.tm.Arg(now, 0), group, from)
}

// HoldOneSQL locks the row ClaimHold took (see InboxSQL.HoldOne).
type HoldOneSQL struct{ text }

// $1 the id, $2 the lease ClaimHold wrote.
func (w inboxTable) holdOne() HoldOneSQL {
	if w.t.Attempts == "" {
		return HoldOneSQL{}
	}
	return HoldOneSQL{w.text(fmt.Sprintf("SELECT 1 FROM %s WHERE %s = $1 AND %s = $2 FOR UPDATE", w.t.Name, w.t.ID, w.t.LockedUntil))}
}

// Call locks row id if it still has the lease ClaimHold wrote.
func (s HoldOneSQL) Call(id int64, lease time.Time) Call {
	return s.call(id, s.tm.Encode(lease))
}

// SelectAvailableSQL reads and locks the first available row (see
// InboxSQL.SelectAvailable).
type SelectAvailableSQL struct {
	text
	resumes bool
}

// $1 now, $2 the group, $3 the resume point (where claims take one).
func (w inboxTable) selectAvailable() SelectAvailableSQL {
	return SelectAvailableSQL{w.text(fmt.Sprintf("SELECT %s %s LIMIT 1%s", w.returning(), w.claimable(1, 2, 3, ""), w.d.SkipLocked())), w.resumes()}
}

// Call reads the first row of group available at now, from id from on.
func (s SelectAvailableSQL) Call(now time.Time, group any, from int64) Call {
	if !s.resumes {
		return s.call(s.tm.Arg(now, 0), group)
	}
	return s.call(s.tm.Arg(now, 0), group, from)
}

// FloorSQL reads the least id of a group (see InboxSQL.Floor).
type FloorSQL struct{ text }

// $1 the id, $2 the group.
func (w inboxTable) floor() FloorSQL {
	return FloorSQL{w.text(fmt.Sprintf("SELECT min(%s) FROM %s WHERE %s >= %s%s", w.t.ID, w.t.Name, w.t.ID, w.d.bigint(1), w.group(2)))}
}

// Call reads the least id of group at or above from.
func (s FloorSQL) Call(from int64, group any) Call { return s.call(from, group) }
