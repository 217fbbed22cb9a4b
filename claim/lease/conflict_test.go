package lease

import (
	"context"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/internal/testdb"
)

// On MariaDB an ack that waits past innodb_lock_wait_timeout for a row
// another transaction locked (1205) is sent again, not reported: the
// blocking transaction lets the row go only once the ack's first statement
// timed out and the next one waits, and the ack then succeeds.
func TestAckRetriesLockWaitTimeout(t *testing.T) {
	url := testdb.MySQL(t) + "?innodb_lock_wait_timeout=1"
	c, db := newClaimer(t, url, clock.Host{}, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	jobs, err := c.Claim(ctx, 1)
	if err != nil || len(jobs) != 1 {
		t.Fatalf("claimed %d rows (%v), want 1", len(jobs), err)
	}
	blocker, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Rollback()
	if _, err := blocker.ExecContext(ctx, "SELECT id FROM jobs WHERE id = ? FOR UPDATE", jobs[0].ID); err != nil {
		t.Fatal(err)
	}
	acked := make(chan error, 1)
	go func() { acked <- jobs[0].Ack(ctx) }()
	testdb.WaitResent(ctx, t, db, acked, "ack", "DELETE")
	if err := blocker.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := <-acked; err != nil {
		t.Fatalf("the ack after a lock wait timeout: %v, want it sent again and done", err)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM jobs").Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rows left after the ack (%v), want none", n, err)
	}
}
