package dialect_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// A statement kept prepared on SQLite follows the table: it fails plainly
// while the table is gone and works again, with the new columns, once the
// table is back; after Close the text is sent as it is.
func TestStmtsFollowTheTable(t *testing.T) {
	ctx := context.Background()
	db, d, err := dialect.Open("sqlite://:memory:stmts_follow")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(2) // two connections, each with its own prepared copy
	st := dialect.NewStmts(db, d)
	mustExec := func(q string) {
		t.Helper()
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	count := func() (int, error) {
		rows, err := st.QueryContext(ctx, "SELECT count(*) FROM t WHERE v <> ?1", "skip")
		if err != nil {
			return 0, err
		}
		defer rows.Close()
		var n int
		for rows.Next() {
			if err := rows.Scan(&n); err != nil {
				return 0, err
			}
		}
		return n, rows.Err()
	}

	mustExec("CREATE TABLE t (v TEXT)")
	for _, v := range []string{"a", "b", "skip"} {
		if _, err := st.ExecContext(ctx, "INSERT INTO t (v) VALUES (?1)", v); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := count(); err != nil || n != 2 {
		t.Fatalf("count = %d, %v; want 2", n, err)
	}

	mustExec("DROP TABLE t")
	if _, err := count(); err == nil || !strings.Contains(err.Error(), "no such table") {
		t.Fatalf("count on a dropped table: %v, want no such table", err)
	}
	if _, err := st.ExecContext(ctx, "INSERT INTO t (v) VALUES (?1)", "c"); err == nil {
		t.Fatal("insert into a dropped table succeeded")
	}

	mustExec("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)")
	if _, err := st.ExecContext(ctx, "INSERT INTO t (v) VALUES (?1)", "c"); err != nil {
		t.Fatalf("insert after the table came back: %v", err)
	}
	if n, err := count(); err != nil || n != 1 {
		t.Fatalf("count after the table came back = %d, %v; want 1", n, err)
	}

	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ExecContext(ctx, "INSERT INTO t (v) VALUES (?1)", "d"); err != nil {
		t.Fatalf("insert after Close: %v", err)
	}
	if n, err := count(); err != nil || n != 2 {
		t.Fatalf("count after Close = %d, %v; want 2", n, err)
	}
}
