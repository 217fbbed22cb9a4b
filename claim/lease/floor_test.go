package lease

import (
	"context"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/internal/claim"
	"github.com/sqlinbox/sqlinbox/internal/testdb"
)

// claimIDs claims up to n rows and acks every one not in keep; it returns
// the ids claimed and the jobs kept.
func claimIDs(t *testing.T, c *claimer, n int, keep func(id int64) bool) (ids []int64, kept map[int64]*claim.Job) {
	t.Helper()
	ctx := context.Background()
	jobs, err := c.Claim(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	kept = map[int64]*claim.Job{}
	for _, j := range jobs {
		ids = append(ids, j.ID)
		if keep != nil && keep(j.ID) {
			kept[j.ID] = j
			continue
		}
		if err := j.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return ids, kept
}

// Rows that exist when the floor is read are at or above it: a lease run
// out, a retry come due and a delayed publish are each taken within one
// Rescan of coming due, while rows are acked and the floor is read again
// every Rescan.
func TestFloorKeepsHeldRows(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c, db := newClaimer(t, testdb.Postgres(t), clk, 4)
	ctx := context.Background()
	start := clk.Now()
	ids, kept := claimIDs(t, c, 4, func(id int64) bool { return id <= 2 })
	if len(ids) != 4 {
		t.Fatalf("claimed %v, want 4 rows", ids)
	}
	if err := kept[1].Retry(ctx, 10*time.Minute, "again"); err != nil {
		t.Fatal(err)
	}
	// Row 2 keeps its lease (an hour) and is never settled: its holder died.
	var delayed int64
	if err := db.QueryRow("INSERT INTO jobs (payload, locked_until) VALUES ('p', $1) RETURNING id", start.Add(30*time.Minute)).Scan(&delayed); err != nil {
		t.Fatal(err)
	}
	due := map[int64]time.Time{1: start.Add(10 * time.Minute), 2: start.Add(time.Hour), delayed: start.Add(30 * time.Minute)}
	for step := 0; step < 90 && len(due) > 0; step++ {
		clk.Advance(time.Minute)
		// A fresh row each minute, taken and acked: the floor is read again.
		if _, err := db.Exec("INSERT INTO jobs (payload) VALUES ('p')"); err != nil {
			t.Fatal(err)
		}
		got, _ := claimIDs(t, c, 10, nil)
		for _, id := range got {
			at, ok := due[id]
			if !ok {
				continue
			}
			if late := clk.Now().Sub(at); late < 0 || late > 2*time.Minute {
				t.Fatalf("row %d taken at +%v, due at +%v", id, clk.Now().Sub(start), at.Sub(start))
			}
			delete(due, id)
		}
	}
	if len(due) > 0 {
		t.Fatalf("rows never taken again after coming due: %v (floor %d)", due, c.mark.Floor())
	}
}

// A row that commits after the floor was read, with an id below every row
// then live (its transaction took its id first and committed last), is
// below the floor: it is taken by the claim after the next floor read from
// the table's start, within DeepRescans+1 Rescans.
func TestFloorOutOfOrderCommit(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c, db := newClaimer(t, testdb.Postgres(t), clk, 0)
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var late, early int64
	if err := tx.QueryRow("INSERT INTO jobs (payload) VALUES ('p') RETURNING id").Scan(&late); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow("INSERT INTO jobs (payload) VALUES ('p') RETURNING id").Scan(&early); err != nil {
		t.Fatal(err)
	}
	if got, _ := claimIDs(t, c, 10, nil); len(got) != 1 || got[0] != early {
		t.Fatalf("claimed %v, want [%d]", got, early)
	}
	clk.Advance(time.Minute)
	claimIDs(t, c, 10, nil) // reads the floor: nothing left, so one past the last id taken
	if c.mark.Floor() <= late {
		t.Fatalf("floor %d, want above the uncommitted row %d (the case under test)", c.mark.Floor(), late)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	committed := clk.Now()
	for range claim.DeepRescans + 2 {
		clk.Advance(time.Minute)
		if got, _ := claimIDs(t, c, 10, nil); len(got) > 0 {
			if len(got) != 1 || got[0] != late {
				t.Fatalf("claimed %v, want [%d]", got, late)
			}
			if waited := clk.Now().Sub(committed); waited > (claim.DeepRescans+1)*time.Minute {
				t.Fatalf("row %d taken %v after its commit, want within %v", late, waited, (claim.DeepRescans+1)*time.Minute)
			}
			return
		}
	}
	t.Fatalf("row %d, committed below the floor, was never taken", late)
}
