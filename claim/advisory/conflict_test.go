package advisory

import (
	"context"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/internal/testdb"
)

// On MariaDB a settlement that waits past innodb_lock_wait_timeout for a
// row another transaction locked (1205) is sent again, not reported lost:
// the blocking transaction lets the row go only once the settlement's
// first statement timed out and the next one waits. Ack and retry each.
func TestSettlementRetriesLockWaitTimeout(t *testing.T) {
	for _, what := range []string{"ack", "retry"} {
		t.Run(what, func(t *testing.T) {
			t.Parallel()
			f := newFixtureAt(t, inboxtest.MySQL(t)+"?innodb_lock_wait_timeout=1", dialect.MySQL)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			jobs, err := f.c.Claim(ctx, 1)
			if err != nil || len(jobs) != 1 {
				t.Fatalf("claimed %d rows (%v), want 1", len(jobs), err)
			}
			blocker, err := f.db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer blocker.Rollback()
			if _, err := blocker.ExecContext(ctx, "SELECT id FROM advisory_jobs WHERE id = ? FOR UPDATE", jobs[0].ID); err != nil {
				t.Fatal(err)
			}
			settled := make(chan error, 1)
			go func() {
				if what == "ack" {
					settled <- jobs[0].Ack(ctx)
				} else {
					settled <- jobs[0].Retry(ctx, time.Hour, "later")
				}
			}()
			testdb.WaitResent(ctx, t, f.db, settled, what, "DELETE", "UPDATE")
			if err := blocker.Rollback(); err != nil {
				t.Fatal(err)
			}
			if err := <-settled; err != nil {
				t.Fatalf("the %s after a lock wait timeout: %v, want it sent again and done", what, err)
			}
			if n := f.locks(t); n != 0 {
				t.Errorf("%d advisory locks held after the %s, want none", n, what)
			}
		})
	}
}
