package dialect

import (
	"fmt"
	"strings"
)

// Table names the columns of an inbox table by role, all quoted. Optional
// roles are empty when the table lacks them.
type Table struct {
	Name        string
	ID          string
	LockedUntil string
	Group       string
	Attempts    string
	LastError   string
	// Columns are the columns every claim returns after id, locked_until and
	// attempts (the user's struct fields), quoted.
	Columns []string
	// OneHeap: the table is one heap on Postgres (see Dialect.OneHeap), so
	// the lease claim may name the rows it locked by ctid.
	OneHeap bool
	// Priority is the priority column, "" for none: claims then take rows
	// by priority, then id (see claimOrder).
	Priority string
	// Blocks is the table's block sequence, quoted, "" for none: claims of
	// a backlog then take blocks of ids from it (see InboxSQL.Ticket).
	Blocks string
}

// InboxSQL is every statement the claim forms run on one table. Each is a
// type of its own whose Call method takes the statement's parameters by
// name and type and returns them in order.
type InboxSQL struct {
	// ClaimLease claims rows and counts their attempt (attempts + 1, where
	// the column exists). Returns id, locked_until, attempts, Columns...
	ClaimLease ClaimLeaseSQL
	// ClaimHold is the row-lock form's first step where the table counts
	// attempts: ClaimLease for one row, committed on its own so that the
	// attempt is counted even when the holder dies; the lease it writes
	// only bridges the step to the lock (see HoldOne). Empty where the
	// table has no attempts column.
	ClaimHold ClaimHoldSQL
	// HoldOne locks the row ClaimHold took, inside the holder's
	// transaction.
	HoldOne HoldOneSQL
	// SelectAvailable: the first row a row-lock claim may take, in id
	// order. Row lock appends the lock clause. Its LIMIT 1 is written out,
	// not a parameter: with a parameter Postgres estimates a tenth of the
	// table for the limit, finds the generic plan dear and plans the
	// statement at every execution (pg_prepared_statements: custom_plans
	// only), 12% of the machine's CPU in a row-lock drain.
	SelectAvailable SelectAvailableSQL
	// LockAvailable walks the available rows after the last one seen in
	// claim order (id, or priority then id) and tries an advisory lock on
	// each, until it holds the limit or has tried the most it may, and
	// returns one row (id, locked, priority) per row tried; without a
	// priority column the priority returned is 0. The lock key is (class,
	// id mod 2^32 as int4): ids that collide wait for each other, they
	// never share a holder. A row comes back with locked false when another
	// session holds it; as many rows back as it may try and fewer locked
	// than the limit mean there may be more rows above the last.
	LockAvailable LockAvailableSQL
	// Reread reads rows again by id once locked and counts their attempt
	// (where the table has the column).
	Reread RereadSQL
	// Ack deletes a claimed row fenced on its lease.
	Ack AckSQL
	// AckMany deletes claimed rows fenced on their leases and returns the
	// ids it deleted.
	AckMany AckManySQL
	// Retry sets a new time and keeps the last error, fenced. The attempt
	// was counted by the claim.
	Retry RetrySQL
	// Park is Retry with the time never.
	Park ParkSQL
	// Snooze sets a new time and gives back the attempt the claim counted,
	// fenced.
	Snooze SnoozeSQL
	// Extend moves the lease, fenced. Returns locked_until.
	Extend ExtendSQL
	// Release gives an unstarted row back, with the attempt its claim
	// counted.
	Release ReleaseSQL
	// Delete removes a row held by a lock (row-lock and advisory forms).
	Delete DeleteSQL
	// DeleteMany removes rows held by advisory locks and returns the ids it
	// deleted (its one parameter a bigint[]; its text form binds too).
	// Postgres only.
	DeleteMany DeleteManySQL
	// RetryLocked, ParkLocked and SnoozeLocked are Retry, Park and Snooze
	// for rows held by a lock.
	RetryLocked  RetryLockedSQL
	ParkLocked   ParkLockedSQL
	SnoozeLocked SnoozeLockedSQL
	// ReleaseLocked gives back a row held by a lock, with the attempt its
	// claim counted, available at once.
	ReleaseLocked ReleaseLockedSQL
	// Unlock releases advisory locks (its parameters the lock class, an
	// int4, and the ids, a bigint[]).
	Unlock UnlockSQL
	// UnlockAll releases every advisory lock of the session, before a
	// session that may still hold some goes back to its pool.
	UnlockAll PlainSQL
	// Parked lists parked rows in id order.
	Parked ParkedSQL
	// Count counts rows by state. Returns available, held (leased or
	// delayed), parked.
	Count CountSQL
	// Unpark makes parked rows available again with no attempts.
	Unpark UnparkSQL
	// Floor is the least id of any row of the group at or above an id,
	// held or not (NULL when there is none). Postgres only (see
	// claim.Mark): there a walk of the primary key steps over the entry of
	// every row deleted since the last vacuum, and a claim that starts at
	// the floor steps over none below it.
	Floor FloorSQL
	// ClaimBlock is ClaimLease below an id as well ($6, exclusive): a claim
	// inside the block of ids its claimer took a ticket for (see Ticket),
	// or behind it. Empty where Ticket is.
	ClaimBlock ClaimBlockSQL
	// Ticket takes the next block of ids from the table's block sequence
	// (see migrations.ApplyClaimBlocks), no lower than the block asked
	// for. Empty but on Postgres tables that have the sequence and no
	// priority column (claims by priority do not go in id order).
	Ticket TicketSQL
}

// MaxClaim is the most rows one claim takes.
const MaxClaim = 1000

// BlockIDs is how many ids a block of the block sequence spans (see
// InboxSQL.Ticket): block t is the ids t*BlockIDs up to below
// (t+1)*BlockIDs.
const BlockIDs = 1024

// Inbox writes the statements of table t whose locked_until is kept as tm.
func (d *Dialect) Inbox(t Table, tm Times) InboxSQL {
	lu := t.LockedUntil
	returning := t.ID + ", " + lu + ", " + or(t.Attempts, "0")
	if len(t.Columns) > 0 {
		returning += ", " + strings.Join(t.Columns, ", ")
	}
	available := fmt.Sprintf("(%s IS NULL OR %s <= %s)", lu, lu, tm.At(2))
	group := func(n int) string {
		if t.Group == "" {
			return fmt.Sprintf(" AND $%d::text IS NULL", n)
		}
		return fmt.Sprintf(" AND %s = $%d", t.Group, n)
	}
	if d.Kind == SQLite {
		group = func(n int) string {
			if t.Group == "" {
				return fmt.Sprintf(" AND $%d IS NULL", n)
			}
			return fmt.Sprintf(" AND %s = $%d", t.Group, n)
		}
	}
	bump, unbump, bumpErr := "", "", ""
	if t.Attempts != "" {
		bump = fmt.Sprintf(", %s = %s + 1", t.Attempts, t.Attempts)
		unbump = fmt.Sprintf(", %[1]s = CASE WHEN %[1]s > 0 THEN %[1]s - 1 ELSE 0 END", t.Attempts)
	}
	unusedErr := ""
	if t.LastError != "" {
		bumpErr = fmt.Sprintf(", %s = $4", t.LastError)
	} else {
		unusedErr = unused(d, 4)
	}
	// The rows a claim takes, in id order, locked where the engine locks.
	// The resume point is a bigint whatever the id's type (it starts at
	// math.MinInt64, which an untyped parameter inferred as int4 or int2
	// cannot carry); int2/int4 >= int8 is in the integer btree family, so
	// the primary key still serves the comparison.
	order, from := claimOrder(d, t)
	where := fmt.Sprintf("FROM %s WHERE %s AND %s%s ORDER BY %s", t.Name, from(5), available, group(4), order)
	blockWhere := fmt.Sprintf("FROM %s WHERE %s AND %s < %s AND %s%s ORDER BY %s", t.Name, from(5), t.ID, d.bigint(6), available, group(4), order)
	var claim, claimBlock string
	switch {
	case d.Kind == SQLite:
		// SQLite re-prepares a statement whose LIMIT is a bare parameter
		// each time its value changes (it plans for the value bound), and a
		// claim's limit is the number of free workers, which changes all
		// the time: an expression keeps the one plan.
		claim = fmt.Sprintf("UPDATE %s SET %s = %s%s WHERE %s IN (SELECT %s %s LIMIT ($3 + 0)) RETURNING %s",
			t.Name, lu, tm.At(1), bump, t.ID, t.ID, where, returning)
	case t.OneHeap:
		// On Postgres the limit that locks is written out (MaxClaim) and the
		// claim's own limit is applied over it: rows are locked as they are
		// pulled, so no more than $3 are. With a bare LIMIT $3 Postgres
		// costs the generic plan at a tenth of the table, never picks it,
		// and plans every claim again (pg_prepared_statements: custom plans
		// only; 3.6% of the machine's CPU in a 2x100 drain).
		//
		// The update finds the rows the select locked by their address (a
		// TID scan), not by a second probe of the primary key each: a
		// locked row's ctid cannot change under the lock. Only on one heap:
		// partitions and child tables number their ctids each on its own,
		// and the update would also take the rows of the others at the same
		// addresses (200k jobs 2x100, six runs each: 62.7k -> 65.3k jobs/s
		// on average, machine CPU 25.8 -> 24.6 us a job).
		const form = "UPDATE %s SET %s = %s%s WHERE ctid = ANY(ARRAY(SELECT ctid FROM (SELECT ctid, %s %s LIMIT %d%s) AS c LIMIT $3)) RETURNING %s"
		claim = fmt.Sprintf(form, t.Name, lu, tm.At(1), bump, t.ID, where, MaxClaim, d.SkipLocked(), returning)
		claimBlock = fmt.Sprintf(form, t.Name, lu, tm.At(1), bump, t.ID, blockWhere, MaxClaim, d.SkipLocked(), returning)
	default:
		const form = "UPDATE %s SET %s = %s%s WHERE %s = ANY(ARRAY(SELECT %s FROM (SELECT %s %s LIMIT %d%s) AS c LIMIT $3)) RETURNING %s"
		claim = fmt.Sprintf(form, t.Name, lu, tm.At(1), bump, t.ID, t.ID, t.ID, where, MaxClaim, d.SkipLocked(), returning)
		claimBlock = fmt.Sprintf(form, t.Name, lu, tm.At(1), bump, t.ID, t.ID, t.ID, blockWhere, MaxClaim, d.SkipLocked(), returning)
	}
	availableAt1 := fmt.Sprintf("(%s IS NULL OR %s <= %s)", lu, lu, tm.At(1))
	selectAvailable := fmt.Sprintf("SELECT %s FROM %s WHERE %s AND %s%s ORDER BY %s LIMIT 1",
		returning, t.Name, from(3), availableAt1, group(2), order)
	fence := fmt.Sprintf("%s = $1 AND %s = $2", t.ID, lu)
	retryFence := fence + unusedErr
	// The placeholders below are the order of each statement's Call
	// (inboxargs.go).
	x := func(sql string) text { return text{sql: sql, tm: tm, kind: d.Kind} }
	s := InboxSQL{
		ClaimLease:      ClaimLeaseSQL{x(d.Rebind(claim))},
		SelectAvailable: SelectAvailableSQL{x(d.Rebind(selectAvailable))},
		Ack:             AckSQL{x(d.Rebind(fmt.Sprintf("DELETE FROM %s WHERE %s", t.Name, fence)))},
		Retry:           RetrySQL{x(d.Rebind(fmt.Sprintf("UPDATE %s SET %s = %s%s WHERE %s", t.Name, lu, tm.At(3), bumpErr, retryFence)))},
		Park:            ParkSQL{x(d.Rebind(fmt.Sprintf("UPDATE %s SET %s = $3%s WHERE %s", t.Name, lu, bumpErr, retryFence)))},
		Snooze:          SnoozeSQL{x(d.Rebind(fmt.Sprintf("UPDATE %s SET %s = %s%s WHERE %s", t.Name, lu, tm.At(3), unbump, fence)))},
		Extend:          ExtendSQL{x(d.Rebind(fmt.Sprintf("UPDATE %s SET %s = %s WHERE %s RETURNING %s", t.Name, lu, tm.At(3), fence, lu)))},
		Release:         ReleaseSQL{x(d.Rebind(fmt.Sprintf("UPDATE %s SET %s = NULL%s WHERE %s", t.Name, lu, unbump, fence)))},
		Delete:          DeleteSQL{x(d.Rebind(fmt.Sprintf("DELETE FROM %s WHERE %s = $1", t.Name, t.ID)))},
	}
	byID := fmt.Sprintf("%s = $1", t.ID) + unused(d, 2) + unusedErr
	s.RetryLocked = RetryLockedSQL{x(d.Rebind(fmt.Sprintf("UPDATE %s SET %s = %s%s WHERE %s", t.Name, lu, tm.At(3), bumpErr, byID)))}
	s.ParkLocked = ParkLockedSQL{x(d.Rebind(fmt.Sprintf("UPDATE %s SET %s = $3%s WHERE %s", t.Name, lu, bumpErr, byID)))}
	s.SnoozeLocked = SnoozeLockedSQL{x(d.Rebind(fmt.Sprintf("UPDATE %s SET %s = %s%s WHERE %s = $1%s", t.Name, lu, tm.At(3), unbump, t.ID, unused(d, 2))))}
	s.ReleaseLocked = ReleaseLockedSQL{x(d.Rebind(fmt.Sprintf("UPDATE %s SET %s = NULL%s WHERE %s = $1", t.Name, lu, unbump, t.ID)))}
	s.Parked = ParkedSQL{x(d.Rebind(fmt.Sprintf("SELECT %s FROM %s WHERE %s = $1%s ORDER BY %s", returning, t.Name, lu, group(2), t.ID)))}
	s.Count = CountSQL{x(d.Rebind(fmt.Sprintf(`SELECT
	COALESCE(SUM(CASE WHEN %[1]s IS NULL OR %[1]s <= %[3]s THEN 1 ELSE 0 END), 0),
	COALESCE(SUM(CASE WHEN %[1]s > %[3]s AND %[1]s < $2 THEN 1 ELSE 0 END), 0),
	COALESCE(SUM(CASE WHEN %[1]s >= $2 THEN 1 ELSE 0 END), 0)
FROM %[2]s WHERE TRUE%[4]s`, lu, t.Name, tm.At(1), group(3))))}
	reset := ""
	if t.Attempts != "" {
		reset = fmt.Sprintf(", %s = 0", t.Attempts)
	}
	s.Unpark = UnparkSQL{x(d.Rebind(fmt.Sprintf("UPDATE %s SET %s = NULL%s WHERE %s = $1 AND %s%s", t.Name, lu, reset, lu, d.InList(t.ID, 2), group(3))))}
	if d.Kind == SQLite {
		// Each pair is looked up by id on the primary key, then fenced.
		s.AckMany = AckManySQL{x(fmt.Sprintf("DELETE FROM %s WHERE %s IN (SELECT t.%s FROM json_each(?1) AS a JOIN %s AS t ON t.%s = json_extract(a.value, '$[0]') AND t.%s = json_extract(a.value, '$[1]')) RETURNING %s",
			t.Name, t.ID, t.ID, t.Name, t.ID, lu, t.ID))}
	}
	if d.Kind == Postgres {
		// A lease in microseconds is exact: the product is below 2^53.
		s.AckMany = AckManySQL{x(fmt.Sprintf("DELETE FROM %s AS t USING unnest($1::bigint[], $2::bigint[]) AS a(id, lease) WHERE t.%s = a.id AND t.%s = timestamptz 'epoch' + a.lease * interval '1 microsecond' RETURNING t.%s", t.Name, t.ID, lu, t.ID))}
		// A recursive walk, one row a step: each step reads the next
		// available id above the last (a primary-key probe) and tries its
		// lock in the step's select list, which runs once for each row the
		// step returns and for no other; the walk stops at the limit. Every
		// row a step returns is in the result, so every lock taken is seen
		// by the caller and none can leak. No pg_locks read: that view takes
		// every lock-manager partition lock, which costs more the busier the
		// database is (0.05 ms idle, 1 to 4 ms during a drain here).
		// With priorities each step reads the next row after (priority,
		// id) on the (priority, id) index, a row comparison it serves as
		// one probe: the column is NOT NULL (the table check asks for it),
		// so the comparison never meets a NULL.
		pri, next, order := "0", fmt.Sprintf("%s > w.id", t.ID), t.ID
		if t.Priority != "" {
			pri = t.Priority + "::int"
			next = fmt.Sprintf("(%s, %s) > (w.pri, w.id)", t.Priority, t.ID)
			order = t.Priority + ", " + t.ID
		}
		s.LockAvailable = LockAvailableSQL{x(fmt.Sprintf(`WITH RECURSIVE walk(id, pri, locked, got, steps) AS (
	SELECT $5::bigint, $7::int, false, 0, 0
	UNION ALL
	SELECT n.id, n.pri, pg_try_advisory_lock($4::int, (n.id %% 4294967296)::bigint::bit(32)::int), w.got + w.locked::int, w.steps + 1
	FROM walk w CROSS JOIN LATERAL (
		SELECT %s AS id, %s AS pri FROM %s WHERE %s%s AND %s ORDER BY %s LIMIT 1
	) n
	WHERE w.got + w.locked::int < $2 AND w.steps < $6
)
SELECT id, locked, pri FROM walk WHERE steps > 0`,
			t.ID, pri, t.Name, availableAt1, group(3), next, order))}
		s.Reread = RereadSQL{x(fmt.Sprintf("SELECT %s FROM %s WHERE %s = ANY($1) AND (%s IS NULL OR %s <= %s)", returning, t.Name, t.ID, lu, lu, tm.At(2)))}
		if t.Attempts != "" {
			// Committed on its own, on the session that holds the locks:
			// a holder that dies has its attempt counted all the same.
			s.Reread = RereadSQL{x(fmt.Sprintf("UPDATE %s SET %s = %s + 1 WHERE %s = ANY($1) AND (%s IS NULL OR %s <= %s) RETURNING %s", t.Name, t.Attempts, t.Attempts, t.ID, lu, lu, tm.At(2), returning))}
			// One row, locked while its attempt is counted and its lease
			// written, committed; the holder's transaction then locks it
			// again by that lease, which no other claimer can take
			// meanwhile. A holder that dies leaves the row held by that
			// lease alone (a few seconds), with its attempt counted.
			s.ClaimHold = ClaimHoldSQL{x(fmt.Sprintf("UPDATE %s SET %s = %s%s WHERE %s = (SELECT %s %s LIMIT 1%s)%s RETURNING %s",
				t.Name, lu, tm.At(1), bump, t.ID, t.ID, where, d.SkipLocked(), unused(d, 3), returning))}
			s.HoldOne = HoldOneSQL{x(fmt.Sprintf("SELECT 1 FROM %s WHERE %s = $1 AND %s = $2 FOR UPDATE", t.Name, t.ID, lu))}
		}
		s.DeleteMany = DeleteManySQL{x(fmt.Sprintf("DELETE FROM %s WHERE %s = ANY($1::bigint[]) RETURNING %s", t.Name, t.ID, t.ID))}
		if t.Blocks != "" && t.Priority == "" {
			s.ClaimBlock = ClaimBlockSQL{x(claimBlock)}
			// The sequence is set to the least block the claimer asks for
			// when it is behind it (a table whose ids went up while no claim
			// took blocks) or past every row (tickets taken as the last
			// backlog ran out), so no block of rows is passed over. Two
			// claimers that set it at once share that block, and a setting
			// back as a backlog runs out gives its last claimers blocks
			// already out: they share those rows' claims, as without blocks.
			s.Ticket = TicketSQL{x(fmt.Sprintf("SELECT CASE WHEN v < $1::bigint OR v::numeric * %[3]d > (SELECT max(%[2]s) FROM %[4]s) THEN setval('%[1]s', $1::bigint) ELSE v END FROM nextval('%[1]s') AS v",
				t.Blocks, t.ID, BlockIDs, t.Name))}
		}
		s.Floor = FloorSQL{x(fmt.Sprintf("SELECT min(%s) FROM %s WHERE %s >= %s%s", t.ID, t.Name, t.ID, d.bigint(1), group(2)))}
		s.Unlock = UnlockSQL{x("SELECT pg_advisory_unlock($1::int, (id % 4294967296)::bigint::bit(32)::int) FROM unnest($2::bigint[]) AS u(id)")}
		s.UnlockAll = PlainSQL{x("SELECT pg_advisory_unlock_all()")}
	}
	return s
}

// claimOrder is the order claims take rows in, and the condition of their
// resume point (parameter n, the least id to look at; see claim.Mark): id
// order from the resume point on; with a priority column, priority then
// id, from the start of that order every time. A resume point is an id,
// and rows in priority order do not rise by id: a claim that started at
// the least id the last one took would pass over rows of a later priority
// with smaller ids, so with priorities the parameter is bound and ignored,
// and the index on (priority, id) (the table check asks for it) serves the
// walk from its start.
func claimOrder(d *Dialect, t Table) (order string, from func(n int) string) {
	if t.Priority == "" {
		return t.ID, func(n int) string { return fmt.Sprintf("%s >= %s", t.ID, d.bigint(n)) }
	}
	return t.Priority + ", " + t.ID, func(n int) string { return fmt.Sprintf("(%s IS NULL OR TRUE)", d.bigint(n)) }
}

// bigint is parameter n typed as a 64-bit integer: on Postgres a cast, so an
// id column of any integer type takes every int64; SQLite integers are all
// 64-bit.
func (d *Dialect) bigint(n int) string {
	if d.Kind == Postgres {
		return fmt.Sprintf("$%d::bigint", n)
	}
	return fmt.Sprintf("$%d", n)
}

// unused binds parameter n in a condition that is always true, so every
// variant of a statement takes the same parameters whatever the table lacks.
func unused(d *Dialect, n int) string {
	if d.Kind == Postgres {
		return fmt.Sprintf(" AND ($%d::text IS NULL OR TRUE)", n)
	}
	return fmt.Sprintf(" AND ($%d IS NULL OR 1)", n)
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
