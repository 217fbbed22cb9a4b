package claim_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/claim/advisory"
	"github.com/sqlinbox/sqlinbox/claim/lease"
	"github.com/sqlinbox/sqlinbox/claim/rowlock"
	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/internal/claim"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/internal/inboxtype"
)

// TestSettlement is the settlement conformance suite: every form, on every
// database it serves, settles a claimed row the way claim.Settler says.
func TestSettlement(t *testing.T) {
	for _, fc := range forms {
		if fc.fair {
			// A fair claimer's jobs are its form's, settled by the form's
			// own settlers: the cases without it cover them.
			continue
		}
		t.Run(fc.name(), func(t *testing.T) {
			t.Parallel()
			for _, kind := range fc.dbs {
				t.Run(kind, func(t *testing.T) {
					t.Parallel()
					st := newSettling(t, suite{form: fc.form, kind: kind, noBlocks: fc.noBlocks})
					t.Run("ack", st.ack)
					t.Run("ack twice", st.ackTwice)
					t.Run("ack after the hold was lost", st.ackAfterLost)
					t.Run("acks together, one lost", st.acksOneLost)
					t.Run("retry", st.retry)
					t.Run("park", st.park)
					t.Run("snooze", st.snooze)
					t.Run("release", st.release)
					t.Run("extend", st.extend)
				})
			}
		})
	}
}

// settling is one form on one database: a table, a fake clock, and a pool
// of the claimers' own, whose sessions the test can find by name.
type settling struct {
	s    suite
	f    *fixture
	clk  *clock.Fake
	d    *dialect.Dialect
	db   *sql.DB // the claimers' pool
	app  string
	q    func(string) string
	tbl  claim.Table
	made []claim.Claimer
}

func newSettling(t *testing.T, s suite) *settling {
	st := &settling{s: s, f: s.setup(t), clk: clock.NewFake(epoch), app: "settle_" + random()}
	url := st.f.url
	if s.kind == postgres {
		url = withParam(t, url, "application_name", st.app)
	}
	db, d, err := dialect.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	// The statements the server runs (MariaDB's RETURNING or MySQL 8's), as
	// a broker probes it.
	if err := d.Probe(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	st.db, st.d = db, d
	var declared string
	if d.Kind == dialect.SQLite {
		if err := db.QueryRow("SELECT type FROM pragma_table_info(?1) WHERE name = 'locked_until'", st.f.table).Scan(&declared); err != nil {
			t.Fatal(err)
		}
	}
	st.tbl = claim.Table{
		Table: dialect.Table{Name: d.Quote(st.f.table), ID: d.Quote("id"), LockedUntil: d.Quote("locked_until"),
			Attempts: d.Quote("attempts"), LastError: d.Quote("last_error")},
		Unquoted: st.f.table,
		Times:    dialect.Times{Kind: d.Kind, Encoding: dialect.EncodingFor(d.Kind, declared)},
		New:      func(dest []any) (any, []any) { return nil, dest },
	}
	st.q = func(q string) string { return d.Rebind(q) }
	return st
}

// claimer makes a claimer of the form, as another instance would have.
func (st *settling) claimer(t *testing.T) claim.Claimer {
	t.Helper()
	stmts := st.d.Inbox(st.tbl.Table, st.tbl.Times)
	env := claim.Env{DB: st.db, Dialect: st.d, Table: st.tbl, SQL: &stmts, Clock: st.clk,
		Lease: time.Hour, Rescan: time.Minute, Conns: 4}
	c, err := st.s.form.New(env)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// one inserts a row and claims it; the table holds no other available row.
func (st *settling) one(t *testing.T) (claim.Claimer, *claim.Job) {
	t.Helper()
	if _, err := st.f.db.Exec("DELETE FROM " + st.d.Quote(st.f.table)); err != nil {
		t.Fatal(err)
	}
	id := st.f.insert(t, 1)[0]
	c := st.claimer(t)
	jobs, err := c.Claim(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || jobs[0].ID != id {
		t.Fatalf("claimed %d rows, want row %d", len(jobs), id)
	}
	if jobs[0].Attempts != 1 {
		t.Fatalf("a first claim counted attempts %d, want 1", jobs[0].Attempts)
	}
	return c, jobs[0]
}

// row reads a row's attempts and last error; ok is false when it is gone.
func (st *settling) row(t *testing.T, id int64) (attempts int, lastErr sql.NullString, ok bool) {
	t.Helper()
	err := st.f.db.QueryRow(st.q("SELECT attempts, last_error FROM "+st.d.Quote(st.f.table)+" WHERE id = $1"), id).Scan(&attempts, &lastErr)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, lastErr, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return attempts, lastErr, true
}

// claimAfter moves the clock by d and claims with a new claimer: the row
// it takes, or nil.
func (st *settling) claimAfter(t *testing.T, d time.Duration) *claim.Job {
	t.Helper()
	st.clk.Advance(d)
	jobs, err := st.claimer(t).Claim(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) == 0 {
		return nil
	}
	if err := jobs[0].Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	return jobs[0]
}

func (st *settling) ack(t *testing.T) {
	_, j := st.one(t)
	if err := j.Ack(context.Background()); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	if _, _, ok := st.row(t, j.ID); ok {
		t.Fatal("the row is still there after its ack")
	}
}

func (st *settling) ackTwice(t *testing.T) {
	_, j := st.one(t)
	if err := j.Ack(context.Background()); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	if err := j.Ack(context.Background()); err == nil {
		t.Fatal("a second Ack of one claim reported success")
	}
}

// ackAfterLost: the lease ran out and another claimer took the row, or the
// connection holding it ended. The ack changes nothing and says ErrLost.
func (st *settling) ackAfterLost(t *testing.T) {
	_, j := st.one(t)
	ctx := context.Background()
	if st.s.form == lease.Form {
		taken := st.claimAfter(t, 2*time.Hour)
		if taken == nil || taken.ID != j.ID {
			t.Fatal("another claimer could not take the row after its lease ran out")
		}
	} else {
		h, ok := j.Settler.(claim.Holder)
		if !ok {
			t.Fatalf("the %s form's settler does not tell a lost hold (claim.Holder)", st.s.form.Name())
		}
		// A failure before the ack below would leave the row locked, and
		// every later case of the suite waiting on it to a lock wait
		// timeout (1205).
		if f, ok := j.Settler.(claim.Forgetter); ok {
			t.Cleanup(f.Forget)
		}
		var n int
		if st.s.kind == mysql && st.s.form == advisory.Form {
			if n = killUserLockHolders(t, st.f.db, st.f.table, j.ID); n == 0 {
				t.Fatal("killed no session holding the row's lock")
			}
		} else if onMySQL(st.s.kind) {
			if n = killTxHolders(t, st.f.db); n == 0 {
				t.Fatal("killed no session holding a transaction")
			}
		} else if err := st.f.db.QueryRow(`SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, st.app).Scan(&n); err != nil || n == 0 {
			t.Fatalf("terminated %d sessions: %v", n, err)
		}
		select {
		case <-h.Hold().Done():
			if !errors.Is(context.Cause(h.Hold()), inboxtype.ErrHoldLost) {
				t.Fatalf("Hold ended with %v, want ErrHoldLost", context.Cause(h.Hold()))
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the hold's end was not told within 30s")
		}
	}
	err := j.Ack(ctx)
	if !errors.Is(err, claim.ErrLost) {
		t.Fatalf("Ack after the hold was lost: %v, want ErrLost", err)
	}
	// The row lock's ack says why, with the one value users test for.
	if st.s.form == rowlock.Form && !errors.Is(err, inbox.ErrHoldLost) {
		t.Fatalf("Ack after the hold was lost: %v, want inbox.ErrHoldLost", err)
	}
	if _, _, ok := st.row(t, j.ID); !ok {
		t.Fatal("an ack after the hold was lost deleted the row")
	}
}

// acksOneLost acks three rows of one claim at once (the lease form sends
// them as one statement) after another claimer took one of them: that one
// is lost, the other two are deleted.
func (st *settling) acksOneLost(t *testing.T) {
	if st.s.form != lease.Form {
		t.Skip("only the lease form batches acks")
	}
	ctx := context.Background()
	if _, err := st.f.db.Exec("DELETE FROM " + st.d.Quote(st.f.table)); err != nil {
		t.Fatal(err)
	}
	st.f.insert(t, 3)
	jobs, err := st.claimer(t).Claim(ctx, 3)
	if err != nil || len(jobs) != 3 {
		t.Fatalf("claimed %d rows: %v", len(jobs), err)
	}
	st.clk.Advance(2 * time.Hour)
	taken, err := st.claimer(t).Claim(ctx, 1)
	if err != nil || len(taken) != 1 {
		t.Fatalf("another claimer took %d rows: %v", len(taken), err)
	}
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Go(func() { errs[i] = j.Ack(ctx) })
	}
	wg.Wait()
	for i, j := range jobs {
		_, _, left := st.row(t, j.ID)
		if j.ID == taken[0].ID {
			if !errors.Is(errs[i], claim.ErrLost) || !left {
				t.Errorf("ack of row %d, taken by another claimer: %v (row left: %v), want ErrLost and the row kept", j.ID, errs[i], left)
			}
			continue
		}
		if errs[i] != nil || left {
			t.Errorf("ack of row %d: %v (row left: %v), want it deleted", j.ID, errs[i], left)
		}
	}
}

func (st *settling) retry(t *testing.T) {
	_, j := st.one(t)
	if err := j.Retry(context.Background(), time.Hour, "boom"); err != nil {
		t.Fatalf("Retry: %v", err)
	}
	if n, le, _ := st.row(t, j.ID); n != 1 || le.String != "boom" {
		t.Fatalf("after a retry: attempts %d, last error %q; want 1 (counted by the claim) and boom", n, le.String)
	}
	if got := st.claimAfter(t, 30*time.Minute); got != nil {
		t.Fatal("claimed again before its delay")
	}
	if got := st.claimAfter(t, time.Hour); got == nil || got.Attempts != 2 {
		t.Fatalf("after the delay: %+v, want the row at attempt 2", got)
	}
}

func (st *settling) park(t *testing.T) {
	_, j := st.one(t)
	if err := j.Park(context.Background(), "never"); err != nil {
		t.Fatalf("Park: %v", err)
	}
	if n, le, _ := st.row(t, j.ID); n != 1 || le.String != "never" {
		t.Fatalf("after a park: attempts %d, last error %q; want 1 and never", n, le.String)
	}
	if got := st.claimAfter(t, 24*365*time.Hour); got != nil {
		t.Fatal("a parked row was claimed a year later")
	}
}

func (st *settling) snooze(t *testing.T) {
	_, j := st.one(t)
	if err := j.Snooze(context.Background(), time.Hour); err != nil {
		t.Fatalf("Snooze: %v", err)
	}
	if n, _, _ := st.row(t, j.ID); n != 0 {
		t.Fatalf("after a snooze: attempts %d, want 0 (the claim's given back)", n)
	}
	if got := st.claimAfter(t, 30*time.Minute); got != nil {
		t.Fatal("claimed again before its snooze ended")
	}
	if got := st.claimAfter(t, time.Hour); got == nil || got.Attempts != 1 {
		t.Fatalf("after the snooze: %+v, want the row at attempt 1", got)
	}
}

func (st *settling) release(t *testing.T) {
	_, j := st.one(t)
	if err := j.Release(context.Background()); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if n, _, _ := st.row(t, j.ID); n != 0 {
		t.Fatalf("after a release: attempts %d, want 0", n)
	}
	if got := st.claimAfter(t, 0); got == nil || got.Attempts != 1 {
		t.Fatalf("after a release: %+v, want the row available at once, at attempt 1", got)
	}
}

// extend: a hold that expires is moved, so another claimer cannot take the
// row past its first lease; a hold that does not expire ignores it.
func (st *settling) extend(t *testing.T) {
	_, j := st.one(t)
	st.clk.Advance(50 * time.Minute)
	if err := j.Extend(context.Background(), time.Hour); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if got := st.claimAfter(t, 30*time.Minute); got != nil {
		t.Fatal("another claimer took the row within its extended lease")
	}
	if err := j.Ack(context.Background()); err != nil {
		t.Fatalf("Ack after Extend: %v", err)
	}
}
