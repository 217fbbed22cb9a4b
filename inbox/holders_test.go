package inbox_test

import (
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/claim/advisory"
	"github.com/sqlinbox/sqlinbox/claim/rowlock"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/internal/claim"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/internal/testdb"
)

// lockDBs runs f, in a subtest named name, on each database that serves
// the forms holding a connection: Postgres, and MariaDB/MySQL.
func lockDBs(t *testing.T, name string, f func(t *testing.T, url string)) {
	t.Run(name, func(t *testing.T) {
		t.Parallel()
		t.Run("postgres", func(t *testing.T) { t.Parallel(); f(t, inboxtest.Postgres(t)) })
		t.Run("mysql", func(t *testing.T) { t.Parallel(); f(t, inboxtest.MySQL(t)) })
	})
}

// holderURL is appURL on Postgres; on MariaDB/MySQL, which has no
// application name, the URL as it is and no name (the holder is found by
// what it holds, see killHolder).
func holderURL(t *testing.T, raw string) (string, string) {
	if strings.HasPrefix(raw, "mysql://") {
		return raw, ""
	}
	return appURL(t, raw)
}

// dbDialect names db's database as the dialect does.
func dbDialect(t *testing.T, db *sql.DB) string {
	t.Helper()
	d, err := dialect.Detect(db)
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// killHolder kills, on MariaDB/MySQL, the connection holding row id of
// table in form f, and fails unless it killed one.
func killHolder(t *testing.T, db *sql.DB, f claim.Form, table string, id int64) {
	t.Helper()
	var holders []int64
	switch f {
	case advisory.Form:
		var database string
		if err := db.QueryRow("SELECT DATABASE()").Scan(&database); err != nil {
			t.Fatal(err)
		}
		var h sql.NullInt64
		if err := db.QueryRow("SELECT IS_USED_LOCK(?)", dialect.AdvisoryLockName(database, advisory.Class(table), id)).Scan(&h); err != nil {
			t.Fatal(err)
		}
		if h.Valid {
			holders = append(holders, h.Int64)
		}
	case rowlock.Form:
		// The holder's transaction stays open with the row locked; a claim
		// in flight on another connection may have one open for a moment,
		// so look again until one is left.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			holders = holders[:0]
			for _, x := range testdb.Transactions(t, db) {
				if x.RowLocks > 0 {
					holders = append(holders, x.Conn)
				}
			}
			if len(holders) == 1 || time.Now().After(deadline) {
				break
			}
		}
	}
	if len(holders) != 1 {
		t.Fatalf("found %d sessions holding row %d of %s in the %s form, want 1", len(holders), id, table, f.Name())
	}
	if _, err := db.Exec(fmt.Sprintf("KILL CONNECTION %d", holders[0])); err != nil {
		t.Fatal(err)
	}
}
