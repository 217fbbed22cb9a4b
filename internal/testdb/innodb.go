package testdb

import (
	"database/sql"
	"fmt"
	"strings"
	"testing"
)

// Txn is an InnoDB transaction of a session of db's database.
type Txn struct {
	Conn     int64 // the session's connection id (KILL CONNECTION takes it)
	RowLocks int   // row locks it holds
	LockWait bool  // it waits for a lock
}

// Transactions lists the started InnoDB transactions of the sessions whose
// database is db's, but db's own, as SHOW ENGINE INNODB STATUS tells them.
// Not information_schema.innodb_trx: MariaDB refreshes that table's cache
// only once it went unread for 100 ms, so while any session polls it
// faster (a test of another package) it shows transactions long ended.
func Transactions(t testing.TB, db *sql.DB) []Txn {
	t.Helper()
	var typ, name, status string
	if err := db.QueryRow("SHOW ENGINE INNODB STATUS").Scan(&typ, &name, &status); err != nil {
		t.Fatal(err)
	}
	// A transaction is "---TRANSACTION ...", then "[LOCK WAIT ]N lock
	// struct(s), heap size H, R row lock(s)...", then "MariaDB thread id
	// C, ..." (MySQL: "MySQL thread id C, ..."); one not started has no
	// thread line.
	var all []Txn
	var cur Txn
	for line := range strings.Lines(status) {
		switch {
		case strings.HasPrefix(line, "---TRANSACTION"):
			cur = Txn{}
		case strings.Contains(line, " row lock(s)"):
			cur.LockWait = strings.HasPrefix(line, "LOCK WAIT")
			if _, after, ok := strings.Cut(line, "heap size "); ok {
				if _, rest, ok := strings.Cut(after, ", "); ok {
					fmt.Sscanf(rest, "%d row lock(s)", &cur.RowLocks)
				}
			}
		case strings.Contains(line, " thread id "):
			_, after, _ := strings.Cut(line, " thread id ")
			if _, err := fmt.Sscanf(after, "%d,", &cur.Conn); err == nil {
				all = append(all, cur)
			}
			cur = Txn{}
		}
	}
	var mine []Txn
	for _, x := range all {
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM information_schema.processlist
			WHERE id = ? AND db = DATABASE() AND id <> CONNECTION_ID()`, x.Conn).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			mine = append(mine, x)
		}
	}
	return mine
}
