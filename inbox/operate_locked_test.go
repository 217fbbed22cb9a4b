package inbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
)

// On Postgres a row that a transaction holds (as a row-lock handler does
// while it runs) is in work: the operator's changes skip it at once instead
// of waiting for the handler, and change the others.
func TestOperatorSkipsRowsInWork(t *testing.T) {
	b := open(t, inboxtest.Postgres(t))
	ctx := context.Background()
	insert(t, b.DB(), 3)
	tx, err := b.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var held int64
	if err := tx.QueryRow("SELECT id FROM jobs ORDER BY id LIMIT 1 FOR UPDATE").Scan(&held); err != nil {
		t.Fatal(err)
	}
	op := inbox.NewOperator(b)
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := op.Delete(dctx, inbox.QueueRef{Table: "jobs"}, inbox.Selection{All: true})
	if err != nil {
		t.Fatalf("delete beside a row in work: %v (it waited for the holder)", err)
	}
	if n != 2 {
		t.Fatalf("deleted %d rows, want the 2 not in work", n)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if got := rows(t, b.DB()); got != 1 {
		t.Fatalf("%d rows left, want the one that was in work", got)
	}
}

// Unpark by a queue is the operator's: on Postgres it skips a parked row a
// transaction holds instead of waiting for it, and unparks the others.
func TestUnparkSkipsRowsInWork(t *testing.T) {
	b := open(t, inboxtest.Postgres(t))
	ctx := context.Background()
	insert(t, b.DB(), 3)
	if _, err := b.DB().ExecContext(ctx, "UPDATE jobs SET locked_until = '9999-12-31', attempts = 5"); err != nil {
		t.Fatal(err)
	}
	tx, err := b.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var held int64
	if err := tx.QueryRow("SELECT id FROM jobs ORDER BY id LIMIT 1 FOR UPDATE").Scan(&held); err != nil {
		t.Fatal(err)
	}
	q := inbox.MustQueue[Job]("jobs")
	parked := inboxtest.ParkedRows(t, b, q)
	if len(parked) != 3 {
		t.Fatalf("%d rows parked, want 3", len(parked))
	}
	uctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := inbox.Unpark(uctx, b, q, parked[0].ID, parked[1].ID, parked[2].ID)
	if err != nil {
		t.Fatalf("unpark beside a row in work: %v (it waited for the holder)", err)
	}
	if n != 2 {
		t.Fatalf("unparked %d rows, want the 2 not in work", n)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	left := inboxtest.ParkedRows(t, b, q)
	if len(left) != 1 || left[0].ID != held {
		t.Fatalf("parked rows left %v, want only row %d, the one in work", left, held)
	}
	for _, r := range inboxtest.Rows(t, b, q) {
		if r.ID != held && (r.State != inboxtest.Available || r.Attempts != 0) {
			t.Errorf("row %d after unpark: %v, want available with no attempts", r.ID, r)
		}
	}
}

// A SQLite table may keep its leases as integer milliseconds and its
// created_at as the text SQLite's own default writes: the operator reads
// the oldest available row's age from that text, for rows written by plain
// SQL.
func TestOldestReadsTextCreatedBesideIntegerLeases(t *testing.T) {
	b := open(t, inboxtest.SQLite(t))
	ctx := context.Background()
	if _, err := b.DB().ExecContext(ctx, `CREATE TABLE mixed_jobs (
		id INTEGER PRIMARY KEY AUTOINCREMENT,
		locked_until INTEGER,
		payload BLOB NOT NULL,
		created_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP)`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.DB().ExecContext(ctx, `INSERT INTO mixed_jobs (payload, created_at) VALUES (x'00', datetime('now', '-20 seconds')), (x'01', datetime('now'))`); err != nil {
		t.Fatal(err)
	}
	ref := inbox.QueueRef{Table: "mixed_jobs", Roles: map[inbox.Role]string{inbox.RoleID: "id", inbox.RoleLockedUntil: "locked_until",
		inbox.RolePayload: "payload", inbox.RoleCreatedAt: "created_at"}}
	st, err := inbox.NewOperator(b).State(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if age := time.Since(st.Oldest); st.Available != 2 || age < 15*time.Second || age > 5*time.Minute {
		t.Fatalf("state %+v: oldest row %v old, want 2 available and the oldest about 20s old", st, age)
	}
}
