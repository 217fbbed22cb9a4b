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
	// Limit is the subscription's limit of rows in work per key value (see
	// limit.go), zero for none: claims pass over the rows of a key value
	// whose slots are all taken, and return the key as text after Columns.
	Limit Limit
	// Rate is the subscription's rate per key value (a Limit with Per set),
	// zero for none: claims pass over the rows of a key value whose window
	// is full too, and return its key as text after Limit's.
	Rate Limit
}

// InboxSQL is every statement the claim forms run on one table. Each is a
// type of its own whose Call method takes the statement's parameters by
// name and type and returns them in order.
type InboxSQL struct {
	// ClaimLease claims rows and counts their attempt (attempts + 1, where
	// the column exists). Returns id, locked_until, attempts, Columns...
	ClaimLease ClaimLeaseSQL
	// ClaimThen, where the claim is two statements (MySQL: see
	// mysqlinbox.go), writes the lease and attempt into the rows
	// ClaimLease's select locked, in the same transaction; its SQL is ""
	// where ClaimLease claims alone.
	ClaimThen ClaimThenSQL
	// ClaimHold is the row-lock form's first step where the table counts
	// attempts: ClaimLease for one row, committed on its own so that the
	// attempt is counted even when the holder dies; the lease it writes
	// only bridges the step to the lock (see HoldOne). Empty where the
	// table has no attempts column.
	ClaimHold ClaimHoldSQL
	// HoldOne locks the row ClaimHold took, inside the holder's
	// transaction.
	HoldOne HoldOneSQL
	// SelectAvailable locks the first row a row-lock claim may take, in
	// claim order, skipping rows locked already. Its LIMIT 1 is written out,
	// not a parameter: with a parameter Postgres estimates a tenth of the
	// table for the limit, finds the generic plan dear and plans the
	// statement at every execution (pg_prepared_statements: custom_plans
	// only).
	SelectAvailable SelectAvailableSQL
	// LockAvailable walks the available rows after the last one seen in
	// claim order (id, or priority then id) and tries an advisory lock on
	// each, until it holds the limit or has tried the most it may, and
	// returns one row (id, locked, priority) per row tried; without a
	// priority column the priority returned is 0. On Postgres the lock key
	// is (class, id mod 2^32 as int4): ids that collide wait for each
	// other, they never share a holder; on MySQL it is the user lock
	// AdvisoryLockName, and rows other sessions hold are passed over, not
	// returned. A row comes back with locked false when another session
	// holds it (or took it between the look and the lock); as many rows
	// back as Reach says and fewer locked than the limit mean there may be
	// more rows above the last.
	LockAvailable LockAvailableSQL
	// Reread reads rows again by id once locked and counts their attempt
	// (where the table has the column; on MySQL CountLocked counts it).
	Reread RereadSQL
	// CountLocked, on MySQL where the table counts attempts, counts the
	// attempt of the locked rows Reread then reads, committed on its own;
	// its SQL is "" where Reread counts it.
	CountLocked CountLockedSQL
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
	// deleted (on Postgres its one parameter a bigint[], whose text form
	// binds too; on MySQL the ids written out, MariaDB 10.5+).
	DeleteMany DeleteManySQL
	// RetryLocked, ParkLocked and SnoozeLocked are Retry, Park and Snooze
	// for rows held by a lock.
	RetryLocked  RetryLockedSQL
	ParkLocked   ParkLockedSQL
	SnoozeLocked SnoozeLockedSQL
	// ReleaseLocked gives back a row held by a lock, with the attempt its
	// claim counted, available at once.
	ReleaseLocked ReleaseLockedSQL
	// Unlock releases advisory locks (on Postgres its parameters the lock
	// class, an int4, and the ids, a bigint[]; on MySQL a RELEASE_LOCK
	// written out for each row).
	Unlock UnlockSQL
	// UnlockAll releases every advisory lock of the session, before a
	// session that may still hold some goes back to its pool.
	UnlockAll PlainSQL
	// Parked lists parked rows in id order.
	Parked ParkedSQL
	// Count counts rows by state. Returns available, held (leased or
	// delayed), parked.
	Count CountSQL
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
	// Ticket takes the next run of blocks of ids from the table's block
	// sequence (see migrations.ApplyClaimBlocks), no lower than the block
	// asked for. Empty but on Postgres tables that have the sequence and no
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
// Each statement is written beside its Call (claims.go, settle.go,
// advisory.go, states.go), which gives its parameters in the order its text
// numbers them.
func (d *Dialect) Inbox(t Table, tm Times) InboxSQL {
	w := inboxTable{d: d, t: t, tm: tm}
	s := InboxSQL{
		ClaimLease:    w.claimLease(),
		Ack:           w.ack(),
		AckMany:       w.ackMany(),
		Retry:         w.retry(),
		Park:          w.park(),
		Snooze:        w.snooze(),
		Extend:        w.extend(),
		Release:       w.release(),
		Delete:        w.delete(),
		RetryLocked:   w.retryLocked(),
		ParkLocked:    w.parkLocked(),
		SnoozeLocked:  w.snoozeLocked(),
		ReleaseLocked: w.releaseLocked(),
		Parked:        w.parked(),
		Count:         w.count(),
	}
	if d.Kind == Postgres {
		s.SelectAvailable = w.selectAvailable()
		s.LockAvailable = w.lockAvailable()
		s.Reread = w.reread()
		s.ClaimHold, s.HoldOne = w.claimHold(), w.holdOne()
		s.DeleteMany = w.deleteMany()
		s.ClaimBlock, s.Ticket = w.claimBlock(), w.ticket()
		s.Floor = w.floor()
		s.Unlock, s.UnlockAll = w.unlock(), w.unlockAll()
	}
	if d.Kind == MySQL {
		w.mysqlClaims(&s)
		w.mysqlAdvisory(&s)
	}
	return s
}

// ClaimReturns is what a claim of table t returns (see ClaimLeaseSQL), its
// columns unqualified, where t has no limit or rate ("" where it has): a
// step its subscription adopts is returned so by its insert (Insert.Held).
func (d *Dialect) ClaimReturns(t Table) string {
	if t.Limit.On() || t.Rate.On() {
		return ""
	}
	return inboxTable{d: d, t: t}.returning()
}

// inboxTable writes the statements of one table.
type inboxTable struct {
	d  *Dialect
	t  Table
	tm Times
}

// text is a statement of the table, written with $n placeholders.
func (w inboxTable) text(sql string) text { return w.d.text(sql, w.tm) }

// returning is what a claim returns: id, locked_until, attempts (0 where
// the table has none), then Columns.
func (w inboxTable) returning() string {
	r := w.t.ID + ", " + w.t.LockedUntil + ", " + or(w.t.Attempts, "0")
	if len(w.t.Columns) > 0 {
		r += ", " + strings.Join(w.t.Columns, ", ")
	}
	return r + w.limitReturning()
}

// available is the condition of a row available at the time in parameter n.
func (w inboxTable) available(n int) string { return availableCond(w.t.LockedUntil, w.tm.At(n)) }

// group is the condition of a row of the group in parameter n (a NULL
// parameter: no group); on a table without a group column, that no group
// was asked for.
func (w inboxTable) group(n int) string {
	if w.t.Group == "" {
		return " AND " + w.d.isNull(n)
	}
	return fmt.Sprintf(" AND %s = $%d", w.t.Group, n)
}

// isNull is "parameter n is NULL", typed where the engine needs a type.
func (d *Dialect) isNull(n int) string {
	if d.Kind == Postgres {
		return fmt.Sprintf("$%d::text IS NULL", n)
	}
	return fmt.Sprintf("$%d IS NULL", n)
}

// bump counts an attempt, where the table counts them.
func (w inboxTable) bump() string {
	if w.t.Attempts == "" {
		return ""
	}
	return fmt.Sprintf(", %s = %s + 1", w.t.Attempts, w.t.Attempts)
}

// unbump gives an attempt back, where the table counts them.
func (w inboxTable) unbump() string {
	if w.t.Attempts == "" {
		return ""
	}
	return fmt.Sprintf(", %[1]s = CASE WHEN %[1]s > 0 THEN %[1]s - 1 ELSE 0 END", w.t.Attempts)
}

// claimOrder is the order claims take rows in: id order, from a resume
// point (see claim.Mark); with a priority column, priority then id, from
// the start of that order every time. A resume point is an id, and rows in
// priority order do not rise by id: a claim that started at the least id
// the last one took would pass over rows of a later priority with smaller
// ids, so with priorities the claims take no resume point, and the index on
// (priority, id) (the table check asks for it) serves the walk from its
// start.
func (w inboxTable) claimOrder() string {
	if w.t.Priority == "" {
		return w.t.ID
	}
	return w.t.Priority + ", " + w.t.ID
}

// resumes tells whether claims take a resume point (see claimOrder).
func (w inboxTable) resumes() bool { return w.t.Priority == "" }

// from is the condition of a row at or above the resume point in parameter
// n, and the word after it. The resume point is a bigint whatever the id's
// type (it starts at math.MinInt64, which an untyped parameter inferred as
// int4 or int2 cannot carry); int2/int4 >= int8 is in the integer btree
// family, so the primary key still serves the comparison.
func (w inboxTable) from(n int) string {
	return fmt.Sprintf("%s >= %s AND ", w.t.ID, w.d.bigint(n))
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

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
