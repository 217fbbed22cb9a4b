package lease

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/internal/claim"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/internal/testdb"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// While claims come back full, the next one starts at the least id the last
// one took: a row behind that mark that becomes available again is not
// seen until Rescan has passed on the claimer's clock, or a claim comes back
// short; then it is the first one taken.
func TestClaimMarkAndRescan(t *testing.T) {
	for name, url := range map[string]func(testing.TB) string{"sqlite": testdb.SQLite, "postgres": testdb.Postgres} {
		t.Run(name, func(t *testing.T) {
			clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			c, db := newClaimer(t, url(t), clk, 10)
			ctx := context.Background()
			take := func(n int) []int64 {
				t.Helper()
				jobs, err := c.Claim(ctx, n)
				if err != nil {
					t.Fatal(err)
				}
				var ids []int64
				for _, j := range jobs {
					ids = append(ids, j.ID)
				}
				return ids
			}
			want := func(got []int64, ids ...int64) {
				t.Helper()
				if !slices.Equal(got, ids) {
					t.Fatalf("claimed %v, want %v", got, ids)
				}
			}
			want(take(2), 1, 2)
			want(take(2), 3, 4) // starts at 1: 1 and 2 are held
			// Row 1 comes back (its holder's lease ran out, say).
			if _, err := db.Exec("UPDATE jobs SET locked_until = NULL WHERE id = 1"); err != nil {
				t.Fatal(err)
			}
			want(take(2), 5, 6) // starts at 3: row 1 is behind the mark
			clk.Advance(time.Minute)
			want(take(2), 1, 7) // Rescan passed: from the start
			// A short claim makes the next one look from the start too.
			want(take(5), 8, 9, 10)
			if _, err := db.Exec("UPDATE jobs SET locked_until = NULL WHERE id = 2"); err != nil {
				t.Fatal(err)
			}
			want(take(2), 2)
		})
	}
}

// newClaimer makes the lease form's claimer, with a lease of an hour and a
// Rescan of a minute on clk, on a fresh reference table "jobs" of n rows.
func newClaimer(t *testing.T, url string, clk clock.Clock, n int) (*claimer, *sql.DB) {
	t.Helper()
	db, d, err := dialect.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := migrations.Apply(context.Background(), db, "jobs"); err != nil {
		t.Fatal(err)
	}
	var declared string
	if d.Kind == dialect.SQLite {
		if err := db.QueryRow("SELECT type FROM pragma_table_info('jobs') WHERE name = 'locked_until'").Scan(&declared); err != nil {
			t.Fatal(err)
		}
	}
	tbl := claim.Table{
		Table: dialect.Table{Name: d.Quote("jobs"), ID: d.Quote("id"), LockedUntil: d.Quote("locked_until"),
			Attempts: d.Quote("attempts"), LastError: d.Quote("last_error")},
		Unquoted: "jobs",
		Times:    dialect.Times{Kind: d.Kind, Encoding: dialect.EncodingFor(d.Kind, declared)},
		New:      func(dest []any) (any, []any) { return nil, dest },
	}
	stmts := d.Inbox(tbl.Table, tbl.Times)
	env := claim.Env{DB: db, Dialect: d, Table: tbl, SQL: &stmts, Clock: clk,
		Lease: time.Hour, Rescan: time.Minute, Conns: 3}
	c, err := Form.New(env)
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		if _, err := db.Exec("INSERT INTO jobs (payload) VALUES ('p')"); err != nil {
			t.Fatal(err)
		}
	}
	return c.(*claimer), db
}

// Ids are the publisher's to choose where they are not generated: a row
// with a zero or negative id is claimed like any other.
func TestClaimZeroAndNegativeIDs(t *testing.T) {
	for name, url := range map[string]func(testing.TB) string{"sqlite": testdb.SQLite, "postgres": testdb.Postgres} {
		t.Run(name, func(t *testing.T) {
			clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			c, db := newClaimer(t, url(t), clk, 0)
			if _, err := db.Exec("INSERT INTO jobs (id, payload) VALUES (-5, 'p'), (0, 'p'), (3, 'p')"); err != nil {
				t.Fatal(err)
			}
			jobs, err := c.Claim(context.Background(), 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(jobs) != 3 {
				t.Fatalf("claimed %d of the rows with ids -5, 0 and 3, want 3", len(jobs))
			}
		})
	}
}

// A job whose lease was lost is forgotten: the acks of the others stop
// waiting for it (an ack lingers only while other jobs are in work).
func TestForgetStopsCountingInWork(t *testing.T) {
	c, _ := newClaimer(t, testdb.SQLite(t), clock.Host{}, 2)
	ctx := context.Background()
	jobs, err := c.Claim(ctx, 2)
	if err != nil || len(jobs) != 2 {
		t.Fatalf("claimed %d, %v; want 2", len(jobs), err)
	}
	inWork := func() int {
		return c.acks.commit.Expected()
	}
	if n := inWork(); n != 2 {
		t.Fatalf("in work after the claim: %d, want 2", n)
	}
	jobs[0].Settler.(claim.Forgetter).Forget()
	if n := inWork(); n != 1 {
		t.Fatalf("in work after Forget: %d, want 1", n)
	}
	if err := jobs[1].Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if n := inWork(); n != 0 {
		t.Fatalf("in work after the other's ack: %d, want 0", n)
	}
}

// Two acks of one row in one batch, the first by a holder whose lease ran
// out and the row reclaimed: the batch deletes the row for the holder of
// the lease that stands, and tells the stale one its row was lost.
func TestStaleAckInOneBatchIsLost(t *testing.T) {
	for name, url := range map[string]func(testing.TB) string{"sqlite": testdb.SQLite, "postgres": testdb.Postgres} {
		for _, staleFirst := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/stale_first=%v", name, staleFirst), func(t *testing.T) {
				clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
				c, db := newClaimer(t, url(t), clk, 2)
				ctx := context.Background()
				first, err := c.Claim(ctx, 2)
				if err != nil || len(first) != 2 {
					t.Fatalf("claimed %d, %v; want 2", len(first), err)
				}
				clk.Advance(2 * time.Hour) // both leases run out
				again, err := c.Claim(ctx, 1)
				if err != nil || len(again) != 1 || again[0].ID != first[0].ID {
					t.Fatalf("claimed again %v, %v; want row %d", again, err, first[0].ID)
				}
				stale := dialect.Fenced{ID: first[0].ID, Lease: first[0].Lease}
				current := dialect.Fenced{ID: again[0].ID, Lease: again[0].Lease}
				other := dialect.Fenced{ID: first[1].ID, Lease: first[1].Lease} // its lease ran out too
				batch, s, cur := []dialect.Fenced{stale, current, other}, 0, 1
				if !staleFirst {
					batch, s, cur = []dialect.Fenced{current, stale, other}, 1, 0
				}
				errs := make([]error, len(batch))
				c.acks.flush(batch, errs)
				if !errors.Is(errs[s], claim.ErrLost) {
					t.Errorf("the stale ack returned %v, want ErrLost", errs[s])
				}
				if errs[cur] != nil {
					t.Errorf("the current ack returned %v, want nil", errs[cur])
				}
				// No claim took the other row again, so its lease, though
				// run out, still stands.
				if errs[2] != nil {
					t.Errorf("the other row's ack returned %v, want nil", errs[2])
				}
				var left int
				if err := db.QueryRow("SELECT count(*) FROM jobs").Scan(&left); err != nil {
					t.Fatal(err)
				}
				if left != 0 {
					t.Errorf("%d rows left, want 0", left)
				}
			})
		}
	}
}
