package testdb

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"
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

// WaitResent waits until a statement of db's database whose text starts
// with one of prefixes (e.g. "DELETE") is seen sent again: its time in the
// processlist drops, which means its first send timed out waiting for a
// lock and the library sent it again. It fails the test if done (the
// settlement under test) returns first, or when ctx ends.
func WaitResent(ctx context.Context, t testing.TB, db *sql.DB, done <-chan error, what string, prefixes ...string) {
	t.Helper()
	like := make([]string, len(prefixes))
	for i, p := range prefixes {
		like[i] = "info LIKE '" + p + "%'"
	}
	q := "SELECT id, time_ms FROM information_schema.processlist WHERE db = DATABASE() AND (" + strings.Join(like, " OR ") + ")"
	last := map[int64]int64{}
	for {
		select {
		case err := <-done:
			t.Fatalf("the %s returned (%v) while the row was locked elsewhere", what, err)
		case <-ctx.Done():
			t.Fatalf("the %s's statement was not seen sent again in time", what)
		case <-time.After(20 * time.Millisecond):
		}
		if resent(t, db, q, last) {
			return
		}
	}
}

func resent(t testing.TB, db *sql.DB, q string, last map[int64]int64) bool {
	rows, err := db.Query(q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	again := false
	for rows.Next() {
		var id int64
		var ms float64
		if err := rows.Scan(&id, &ms); err != nil {
			t.Fatal(err)
		}
		if prev, ok := last[id]; ok && int64(ms) < prev {
			again = true
		}
		last[id] = int64(ms)
	}
	return again
}
