package dialect

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The advisory form's statements on MariaDB and MySQL: user locks
// (GET_LOCK), which a session may hold several of at once (MariaDB 10.0.2+,
// MySQL 5.7+) and which the server frees when the session ends. A lock's
// name is server-wide, at most 64 characters, so it is built from a hash of
// the database's name, the table's lock class and the row's id (see
// AdvisoryLockName).

// advisoryName is the SQL of the lock name of row id (an expression) under
// the lock class class (an expression), in the session's database: what
// AdvisoryLockName computes.
func advisoryName(class, id string) string {
	return fmt.Sprintf("CONCAT('sqlinbox.', LEFT(SHA1(DATABASE()), 16), '.', %s, '.', %s)", class, id)
}

// AdvisoryLockName is the name of the MariaDB/MySQL user lock that holds
// row id of a table of lock class class in database database:
// sqlinbox.<the first 16 hex digits of the SHA-1 of the database's
// name>.<class>.<id>, 57 characters at most. IS_USED_LOCK(name) gives the
// holder's connection id.
func AdvisoryLockName(database string, class int32, id int64) string {
	h := sha1.Sum([]byte(database))
	return "sqlinbox." + hex.EncodeToString(h[:])[:16] + "." + strconv.FormatInt(int64(class), 10) + "." + strconv.FormatInt(id, 10)
}

// mysqlAdvisory sets the advisory form's statements on MySQL.
func (w inboxTable) mysqlAdvisory(s *InboxSQL) {
	t := w.t
	pri, next := "0", fmt.Sprintf("%s > $5", t.ID)
	if t.Priority != "" {
		// A range on the (priority, id) index from the priority on; a row
		// comparison would not be served as one.
		pri = t.Priority
		next = fmt.Sprintf("%[1]s >= $7 AND (%[1]s > $7 OR %[2]s > $5)", t.Priority, t.ID)
	}
	// The candidates are read first, in a derived table whose LIMIT keeps
	// it from being merged into the outer select: GET_LOCK runs in the
	// outer select list, which has no condition and no limit, so it runs
	// once for each row returned and for no other, and no lock can leak.
	// IS_FREE_LOCK, which takes nothing, passes over the rows other
	// sessions hold (and this session's own), so the limit counts rows
	// worth trying; one taken by another session between the look and the
	// lock comes back unlocked.
	s.LockAvailable = LockAvailableSQL{text: w.text(fmt.Sprintf(`SELECT c.id, COALESCE(GET_LOCK(%s, 0), 0) = 1, c.pri FROM (
	SELECT %s AS id, %s AS pri FROM %s WHERE %s%s%s AND %s AND IS_FREE_LOCK(%s) ORDER BY %s LIMIT $2
) AS c`,
		advisoryName("$4", "c.id"), t.ID, pri, t.Name, w.limitCond(), w.available(1), w.group(3), next, advisoryName("$4", t.ID), w.claimOrder())), limited: true}
	s.Reread = RereadSQL{text: w.text(fmt.Sprintf("SELECT %s FROM %s WHERE %s AND %s IN ", w.returning(), t.Name, w.available(1), t.ID)), inline: true}
	if t.Attempts != "" {
		s.CountLocked = CountLockedSQL{w.text(fmt.Sprintf("UPDATE %s SET %s = %s + 1 WHERE %s AND %s IN ", t.Name, t.Attempts, t.Attempts, w.available(1), t.ID))}
	}
	// MariaDB 10.5+ only: DELETE ... RETURNING (MySQL 8 has none).
	s.DeleteMany = DeleteManySQL{text: w.text(fmt.Sprintf("DELETE FROM %s WHERE %s IN ", t.Name, t.ID)), inline: " RETURNING " + t.ID}
	s.Unlock = UnlockSQL{text: w.text("DO "), inline: true}
	s.UnlockAll = PlainSQL{w.text("DO RELEASE_ALL_LOCKS()")}
}

// CountLockedSQL counts an attempt of rows held by advisory locks, before
// Reread reads them, where Reread cannot count it itself (MySQL has no
// UPDATE ... RETURNING; see InboxSQL.CountLocked).
type CountLockedSQL struct{ text }

// Call counts an attempt of the rows ids available at now.
func (s CountLockedSQL) Call(ids []int64, now time.Time) Call {
	return Call{SQL: s.sql + idList(ids), Args: s.call(s.tm.Arg(now, 0)).Args}
}

// idList is ids as a parenthesized SQL list: integers, so written out.
func idList(ids []int64) string {
	b := make([]byte, 0, 2+len(ids)*12)
	b = append(b, '(')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, id, 10)
	}
	return string(append(b, ')'))
}

// mysqlUnlock is UnlockSQL.Call on MySQL: one RELEASE_LOCK for each row.
func (s UnlockSQL) mysqlUnlock(class int32, ids []int64) Call {
	var b strings.Builder
	b.WriteString(s.sql)
	c := strconv.FormatInt(int64(class), 10)
	for i, id := range ids {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("RELEASE_LOCK(" + advisoryName(c, strconv.FormatInt(id, 10)) + ")")
	}
	return Call{SQL: b.String()}
}
