package claim_test

import (
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/sqlinbox/sqlinbox/claim/advisory"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// userLockHolders returns, on MariaDB/MySQL, the connection ids holding the
// advisory form's user locks of table's rows ids (none for a row no one
// holds), each id once.
func userLockHolders(t *testing.T, db *sql.DB, table string, ids []int64) []int64 {
	t.Helper()
	var database string
	if err := db.QueryRow("SELECT DATABASE()").Scan(&database); err != nil {
		t.Fatal(err)
	}
	seen := map[int64]bool{}
	var holders []int64
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), 200)]
		ids = ids[len(chunk):]
		parts := make([]string, len(chunk))
		args := make([]any, len(chunk))
		for i, id := range chunk {
			parts[i] = "SELECT IS_USED_LOCK(?) AS holder"
			args[i] = dialect.AdvisoryLockName(database, advisory.Class(table), id)
		}
		rows, err := db.Query("SELECT holder FROM ("+strings.Join(parts, " UNION ALL ")+") AS h WHERE holder IS NOT NULL", args...)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var h int64
			if err := rows.Scan(&h); err != nil {
				t.Fatal(err)
			}
			if !seen[h] {
				seen[h] = true
				holders = append(holders, h)
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows.Close()
	}
	return holders
}

// userLocks counts, on MariaDB/MySQL, the advisory form's user locks held
// on rows of table, for every id the table ever gave (up to its next
// AUTO_INCREMENT value).
func userLocks(t *testing.T, db *sql.DB, table string) int {
	t.Helper()
	var next sql.NullInt64
	if err := db.QueryRow("SELECT AUTO_INCREMENT FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?", table).Scan(&next); err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for id := int64(1); id < next.Int64; id++ {
		ids = append(ids, id)
	}
	var n int
	var database string
	if err := db.QueryRow("SELECT DATABASE()").Scan(&database); err != nil {
		t.Fatal(err)
	}
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), 200)]
		ids = ids[len(chunk):]
		parts := make([]string, len(chunk))
		args := make([]any, len(chunk))
		for i, id := range chunk {
			parts[i] = "(IS_USED_LOCK(?) IS NOT NULL)"
			args[i] = dialect.AdvisoryLockName(database, advisory.Class(table), id)
		}
		var k int
		if err := db.QueryRow("SELECT "+strings.Join(parts, " + "), args...).Scan(&k); err != nil {
			t.Fatal(err)
		}
		n += k
	}
	return n
}

// killUserLockHolders kills (KILL CONNECTION), on MariaDB/MySQL, the
// sessions holding the advisory locks of table's rows ids, and says how
// many it killed.
func killUserLockHolders(t *testing.T, db *sql.DB, table string, ids ...int64) int {
	t.Helper()
	holders := userLockHolders(t, db, table, ids)
	for _, h := range holders {
		if _, err := db.Exec(fmt.Sprintf("KILL CONNECTION %d", h)); err != nil {
			t.Fatal(err)
		}
	}
	return len(holders)
}
