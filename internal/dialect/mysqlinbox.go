package dialect

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The inbox statements that MariaDB and MySQL write their own way. Neither
// has UPDATE ... RETURNING, so a lease claim is two statements in one READ
// COMMITTED transaction: a SELECT ... FOR UPDATE SKIP LOCKED that reads the
// rows as they will be (the lease and the attempt the claim writes) and
// locks them, then one UPDATE of those ids (ClaimThen). READ COMMITTED: at
// REPEATABLE READ InnoDB would keep a lock on every row the select passed
// over (leased rows among them, whose acks would wait) and on the gaps
// between them (where publishes insert).

// ClaimThenSQL writes the claim's lease and attempt into the rows its
// select locked (see InboxSQL.ClaimThen).
type ClaimThenSQL struct {
	text
	t Table
}

// mysqlClaims sets the MySQL claim and the statements that differ.
func (w inboxTable) mysqlClaims(s *InboxSQL) {
	t := w.t
	at := w.tm.At(1)
	if !w.tm.InDatabase {
		at = "CAST($1 AS DATETIME(6))"
	}
	attempts := "0"
	if t.Attempts != "" {
		attempts = t.Attempts + " + 1"
	}
	// The rows as the claim leaves them, as RETURNING reads them elsewhere:
	// a field of the lease or the attempts reads the value written.
	sel := []string{t.ID, at, attempts}
	for _, c := range t.Columns {
		switch c {
		case t.LockedUntil:
			c = at
		case t.Attempts:
			c = attempts
		}
		sel = append(sel, c)
	}
	if l := w.limitReturning(); l != "" {
		sel = append(sel, l[2:])
	}
	s.ClaimLease = ClaimLeaseSQL{w.text(fmt.Sprintf("SELECT %s %s LIMIT $3%s", strings.Join(sel, ", "), w.claimable(2, 4, 5, ""), w.d.SkipLocked())), w.resumes()}
	// The row-lock form: its first step where the table counts attempts
	// is ClaimHold's select then ClaimThen, committed; the holder's
	// transaction then locks the row (HoldOne), or takes one in a single
	// select (SelectAvailable) where attempts are not counted.
	if t.Attempts != "" {
		s.ClaimHold = ClaimHoldSQL{w.text(fmt.Sprintf("SELECT %s %s LIMIT 1%s", strings.Join(sel, ", "), w.claimable(2, 3, 4, ""), w.d.SkipLocked())), w.resumes()}
		s.HoldOne = w.holdOne()
	}
	s.SelectAvailable = w.selectAvailable()
	s.ClaimThen = ClaimThenSQL{w.text(fmt.Sprintf("UPDATE %s SET %s = $1%s WHERE %s IN ", t.Name, t.LockedUntil, w.bump(), t.ID)), t}
	// MariaDB 10.5+ only: DELETE ... RETURNING. MySQL 8 has none: there
	// the statement answers the count of rows it deleted (see
	// AckManySQL.Returns).
	s.AckMany = AckManySQL{text: w.text(fmt.Sprintf("DELETE FROM %s WHERE (%s, %s) IN ", t.Name, t.ID, t.LockedUntil))}
	if w.d.Returns() {
		s.AckMany.mysql = " RETURNING " + t.ID
	}
	s.Extend = ExtendSQL{text: w.text(fmt.Sprintf("UPDATE %s SET %s = %s WHERE %s", t.Name, t.LockedUntil, w.tm.At(3), w.fence()))}
	s.Extend.read = w.text(fmt.Sprintf("SELECT %s FROM %s WHERE %s = $1", t.LockedUntil, t.Name, t.ID))
}

// Call writes lease (as the claim's select read it) into rows ids.
func (s ClaimThenSQL) Call(lease time.Time, ids []int64) Call {
	b := make([]byte, 0, len(s.sql)+2+len(ids)*12)
	b = append(b, s.sql...)
	b = append(b, '(')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, id, 10)
	}
	b = append(b, ')')
	return Call{SQL: string(b), Args: []any{s.tm.Encode(lease)}}
}

// mysqlCall is AckManySQL.Call on MySQL: the rows' (id, lease) pairs
// written into the statement.
func (s AckManySQL) mysqlCall(rows []Fenced) Call {
	var b strings.Builder
	b.WriteString(s.sql)
	b.WriteByte('(')
	args := make([]any, 0, 2*len(rows))
	for i, r := range rows {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("(?,?)")
		args = append(args, r.ID, s.tm.Encode(r.Lease))
	}
	b.WriteByte(')')
	b.WriteString(s.mysql)
	return Call{SQL: b.String(), Args: args}
}

// Returns says the statement returns the ids it deleted. Where it does not
// (MySQL 8), it is run as an Exec in a transaction: when it deleted every
// row the transaction commits; otherwise it is rolled back and each row
// acked alone, since a count cannot tell which rows lost their lease.
func (s AckManySQL) Returns() bool { return s.kind != MySQL || s.mysql != "" }

// Returns says the extension returns the new lease itself; where it does
// not (MySQL), Read reads it once the extension changed the row.
func (s ExtendSQL) Returns() bool { return s.read.sql == "" }

// Read reads row id's lease (see Returns).
func (s ExtendSQL) Read(id int64) Call { return s.read.call(id) }
