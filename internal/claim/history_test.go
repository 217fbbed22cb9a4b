package claim_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/claim"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/internal/testdb"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// historyFixture is a table "jobs" of n rows, each claimed with lease, and
// its history.
func historyFixture(t *testing.T, url string, n int, lease time.Time) (*sql.DB, *dialect.Dialect, *claim.History, dialect.Times) {
	t.Helper()
	ctx := context.Background()
	db := testdb.Open(t, url)
	d, err := dialect.Detect(db)
	if err != nil {
		t.Fatal(err)
	}
	if err := migrations.Apply(ctx, db, "jobs"); err != nil {
		t.Fatal(err)
	}
	if err := migrations.ApplyHistory(ctx, db, "jobs", "id", ""); err != nil {
		t.Fatal(err)
	}
	cols, err := d.Columns(ctx, db, "jobs")
	if err != nil {
		t.Fatal(err)
	}
	var lu string
	h := dialect.HistoryTable{Name: d.Quote("jobs_history")}
	for _, c := range cols {
		h.Columns = append(h.Columns, d.Quote(c.Name))
		if c.Name == "locked_until" {
			lu = c.Type
		}
	}
	tm := dialect.Times{Kind: d.Kind, Encoding: dialect.EncodingFor(d.Kind, lu)}
	for range n {
		if _, err := db.ExecContext(ctx, "INSERT INTO jobs (payload) VALUES ('p')"); err != nil {
			t.Fatal(err)
		}
	}
	set := map[dialect.Kind]string{dialect.Postgres: "UPDATE jobs SET locked_until = $1", dialect.SQLite: "UPDATE jobs SET locked_until = ?1"}[d.Kind]
	if d.Kind == dialect.MySQL {
		set = "UPDATE jobs SET locked_until = ?"
	}
	if _, err := db.ExecContext(ctx, set, tm.Encode(lease)); err != nil {
		t.Fatal(err)
	}
	tbl := dialect.Table{Name: d.Quote("jobs"), ID: d.Quote("id"), LockedUntil: d.Quote("locked_until")}
	return db, d, &claim.History{SQL: d.History(tbl, tm, h, ""), Instance: "test:1"}, tm
}

func count(t *testing.T, db *sql.DB, q string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(q).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A batch of moves in which one row's lease was taken over moves every
// other row and leaves that one in its table, out of the history: where
// the move is a copy and a delete whose counts fall short, the batch is
// rolled back and each row moved alone; a move run in a transaction of
// the caller's (no begin) moves nothing when one row is missing.
func TestHistoryMoveFencedBatch(t *testing.T) {
	for db, urlOf := range map[string]func(testing.TB) string{"sqlite": testdb.SQLite, "postgres": testdb.Postgres, "mysql": testdb.MySQL} {
		t.Run(db, func(t *testing.T) {
			t.Parallel()
			url := urlOf(t)
			ctx := context.Background()
			lease := time.Now().Add(time.Hour).Truncate(time.Millisecond)
			pool, d, h, _ := historyFixture(t, url, 5, lease)
			rows := make([]dialect.Fenced, 5)
			for i := range rows {
				rows[i] = dialect.Fenced{ID: int64(i + 1), Lease: lease, Took: time.Duration(i+1) * time.Millisecond}
			}
			rows[2].Lease = lease.Add(time.Second) // row 3's lease is another claim's

			// In the caller's transaction: all or nothing.
			tx, err := pool.BeginTx(ctx, d.HoldTx())
			if err != nil {
				t.Fatal(err)
			}
			moved, err := h.Move(ctx, tx, nil, rows, true, time.Now())
			tx.Rollback()
			if err != nil {
				t.Fatal(err)
			}
			if len(moved) != 0 && d.Kind != dialect.Postgres {
				t.Fatalf("moved %v in a transaction where row 3 had lost its lease, want none", moved)
			}

			stmts := dialect.NewStmts(pool, d)
			t.Cleanup(func() { stmts.Close() })
			begin := func(ctx context.Context) (*sql.Tx, error) { return pool.BeginTx(ctx, d.HoldTx()) }
			moved, err = h.Move(ctx, stmts, begin, rows, true, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				if want := r.ID != 3; moved[r.ID] != want {
					t.Errorf("row %d moved: %v, want %v (moved %v)", r.ID, moved[r.ID], want, moved)
				}
			}
			if n := count(t, pool, "SELECT count(*) FROM jobs"); n != 1 {
				t.Errorf("%d rows left in jobs, want row 3", n)
			}
			if n := count(t, pool, "SELECT count(*) FROM jobs WHERE id = 3"); n != 1 {
				t.Errorf("row 3, whose lease was lost, is gone from jobs")
			}
			if n := count(t, pool, "SELECT count(*) FROM jobs_history"); n != 4 {
				t.Errorf("%d rows in the history, want 4", n)
			}
			if n := count(t, pool, "SELECT count(*) FROM jobs_history WHERE id = 3"); n != 0 {
				t.Errorf("row 3, whose lease was lost, is in the history")
			}
			if n := count(t, pool, "SELECT count(*) FROM jobs_history WHERE id = 4 AND duration_us = 4000 AND handled_by = 'test:1'"); n != 1 {
				t.Errorf("row 4's history row lacks its duration or instance")
			}
		})
	}
}
