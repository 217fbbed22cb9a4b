package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/claim/advisory"
	"github.com/sqlinbox/sqlinbox/claim/lease"
	"github.com/sqlinbox/sqlinbox/claim/rowlock"
	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/internal/claim"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// formDB is a claim form on a database it serves.
type formDB struct {
	form claim.Form
	db   string
}

// everyFormDB is every form on every database that serves it.
var everyFormDB = []formDB{{lease.Form, "sqlite"}, {lease.Form, "postgres"}, {lease.Form, "mysql"},
	{rowlock.Form, "postgres"}, {rowlock.Form, "mysql"}, {advisory.Form, "postgres"}, {advisory.Form, "mysql"}}

// eachFormDB runs f for every form on every database that serves it.
func eachFormDB(t *testing.T, f func(t *testing.T, form claim.Form, url string)) {
	for _, c := range everyFormDB {
		t.Run(c.form.Name()+"/"+c.db, func(t *testing.T) {
			t.Parallel()
			f(t, c.form, dbURL(t, c.db))
		})
	}
}

func dbURL(t *testing.T, db string) string {
	switch db {
	case "sqlite":
		return inboxtest.SQLite(t)
	case "postgres":
		return inboxtest.Postgres(t)
	}
	return inboxtest.MySQL(t)
}

// historyTable makes a table of its own with its history.
func historyTable(t *testing.T, b *inbox.Broker) string {
	t.Helper()
	table := ownTable(t, b)
	if err := migrations.ApplyHistory(context.Background(), b.DB(), table, "id", ""); err != nil {
		t.Fatal(err)
	}
	return table
}

// historyRow is what a test reads of a history row.
type historyRow struct {
	id        int64
	attempts  int
	lastError sql.NullString
	payload   []byte
	by        string
	took      int64
}

func readHistory(t *testing.T, db *sql.DB, table string) map[int64]historyRow {
	t.Helper()
	rs, err := db.Query("SELECT id, attempts, last_error, payload, handled_by, duration_us FROM " + table + "_history")
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	out := map[int64]historyRow{}
	for rs.Next() {
		var r historyRow
		if err := rs.Scan(&r.id, &r.attempts, &r.lastError, &r.payload, &r.by, &r.took); err != nil {
			t.Fatal(err)
		}
		out[r.id] = r
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// An ack moves the row into the history with its columns as they were,
// when, by which instance and how long its handling took. Every form,
// every database.
func TestHistoryKeepsAckedRows(t *testing.T) {
	eachFormDB(t, func(t *testing.T, form claim.Form, url string) {
		fc := fake()
		b := open(t, url, inbox.WithClock(fc))
		table := historyTable(t, b)
		// A row claimed once before, with the error of that attempt.
		if _, err := b.DB().Exec("INSERT INTO " + table + " (payload, attempts, last_error) VALUES ('first', 1, 'timed out')"); err != nil {
			t.Fatal(err)
		}
		ev := inboxtest.NewEvents(t)
		q := inbox.MustQueue[Job](table)
		sub, err := inbox.Subscribe(b, q, func(ctx context.Context, j Job) error {
			fc.Advance(5 * time.Second) // the handling's duration
			return nil
		}, inbox.Form(form), inbox.History(time.Hour), ev.Observe())
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
		// One row at a time, each acked before the next is published: each
		// is handled 5 s after the one before.
		for n := 1; n <= 3; n++ {
			ev.Wait(fmt.Sprintf("ack %d", n), func(e []inbox.Event) bool { return len(e) == n })
			if n < 3 {
				if _, err := inbox.Publish(context.Background(), b, q, Job{Payload: []byte("p")}); err != nil {
					t.Fatal(err)
				}
			}
		}
		for _, e := range ev.All() {
			if e.Outcome != inbox.Acked {
				t.Fatalf("row %d: %v (%v), want acked", e.ID, e.Outcome, e.Err)
			}
		}
		if n := rowsOf(t, b.DB(), table); n != 0 {
			t.Fatalf("%d rows left in %s, want none", n, table)
		}
		got := readHistory(t, b.DB(), table)
		if len(got) != 3 {
			t.Fatalf("history holds %d rows, want 3: %v", len(got), got)
		}
		host, _ := os.Hostname()
		by := fmt.Sprintf("%s:%d", host, os.Getpid())
		for _, e := range ev.All() {
			r, ok := got[e.ID]
			if !ok {
				t.Fatalf("row %d acked but not in the history", e.ID)
			}
			if r.by != by || r.took != 5_000_000 {
				t.Errorf("row %d: handled by %q in %dus, want %q in 5000000us", e.ID, r.by, r.took, by)
			}
		}
		first := got[1]
		if first.attempts != 2 || first.lastError.String != "timed out" || string(first.payload) != "first" {
			t.Errorf("row 1 in the history: attempts %d, last error %q, payload %q; want 2, %q, %q", first.attempts, first.lastError.String, first.payload, "timed out", "first")
		}
		if got[2].attempts != 1 || got[2].lastError.Valid {
			t.Errorf("row 2 in the history: attempts %d, last error %v; want 1 and none", got[2].attempts, got[2].lastError)
		}
		checkDoneRows(t, b, table, by)
	})
}

// checkDoneRows reads the history of TestHistoryKeepsAckedRows through the
// operator: rows handled 5 s apart from the epoch, newest first, searched
// by id, error text and time.
func checkDoneRows(t *testing.T, b *inbox.Broker, table, by string) {
	t.Helper()
	op := inbox.NewOperator(b)
	ctx := context.Background()
	ref := inbox.QueueRef{Table: table}
	list := func(rf inbox.RowFilter) []int64 {
		rf.States = []string{inbox.StateDone}
		rs, err := op.Rows(ctx, ref, rf)
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for _, r := range rs {
			ids = append(ids, r.ID)
		}
		return ids
	}
	rs, err := op.Rows(ctx, ref, inbox.RowFilter{States: []string{inbox.StateDone}})
	if err != nil || len(rs) != 3 {
		t.Fatalf("done rows: %v, %v; want 3", rs, err)
	}
	for i, r := range rs {
		want := epoch.Add(time.Duration(3-i) * 5 * time.Second)
		if r.ID != int64(3-i) || r.State != inbox.StateDone || !r.Handled.Equal(want) || r.HandledBy != by || r.Took != 5*time.Second {
			t.Errorf("done row %d: %+v; want row %d handled at %v by %s in 5s", i, r, 3-i, want, by)
		}
	}
	if got := list(inbox.RowFilter{ErrorContains: "timed"}); !slices.Equal(got, []int64{1}) {
		t.Errorf("done rows whose error holds %q: %v, want [1]", "timed", got)
	}
	if got := list(inbox.RowFilter{IDs: []int64{2, 7}}); !slices.Equal(got, []int64{2}) {
		t.Errorf("done rows 2 and 7: %v, want [2]", got)
	}
	if got := list(inbox.RowFilter{HandledFrom: epoch.Add(6 * time.Second), HandledBefore: epoch.Add(15 * time.Second)}); !slices.Equal(got, []int64{2}) {
		t.Errorf("done rows handled from 6s before 15s: %v, want [2]", got)
	}
	if _, err := op.Rows(ctx, ref, inbox.RowFilter{States: []string{inbox.StateDone, inbox.StateParked}}); err == nil {
		t.Errorf("done and parked rows listed together, want an error")
	}
}

// An ack whose lease was taken over moves nothing: the row stays queued
// as its new holder left it, and the history stays empty.
func TestHistoryAckStaysFenced(t *testing.T) {
	for _, db := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(db, func(t *testing.T) {
			t.Parallel()
			b := open(t, dbURL(t, db))
			table := historyTable(t, b)
			insertInto(t, b.DB(), table, 1)
			ev := inboxtest.NewEvents(t)
			sub, err := inbox.Subscribe(b, inbox.MustQueue[Job](table), func(ctx context.Context, j Job) error {
				// Another claimer's lease replaces this one's.
				_, err := b.DB().Exec(sqlFor(b, "UPDATE "+table+" SET locked_until = NULL WHERE id = $1"), j.ID)
				return err
			}, inbox.History(time.Hour), inbox.MaxAttempts(1), ev.Observe())
			if err != nil {
				t.Fatal(err)
			}
			stop := inboxtest.RunSubscription(t, sub)
			evs := ev.Wait("the handling", func(e []inbox.Event) bool { return len(e) >= 1 })
			stop()
			if evs[0].Outcome == inbox.Acked {
				t.Fatalf("the ack of a row whose lease was taken over reported acked")
			}
			if n := rowsOf(t, b.DB(), table); n != 1 {
				t.Fatalf("%d rows in %s, want the one row still there", n, table)
			}
			if got := readHistory(t, b.DB(), table); len(got) != 0 {
				t.Fatalf("history holds %v, want nothing", got)
			}
		})
	}
}

// Without its history table, a subscription with History fails its check
// with the DDL that makes it, and that DDL makes a table it runs on.
func TestHistoryTableCheck(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		b := open(t, url)
		table := ownTable(t, b)
		sub, err := inbox.Subscribe(b, inbox.MustQueue[Job](table), func(context.Context, Job) error { return nil }, inbox.History(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err = sub.Run(ctx)
		var te *inbox.TableError
		if !errors.As(err, &te) || te.Table != table+"_history" || !strings.Contains(te.Fix, "CREATE TABLE") {
			t.Fatalf("Run = %v, want a TableError on %s_history with its DDL", err, table)
		}
		for _, stmt := range te.Problems[0:1] {
			for _, q := range strings.Split(stmt.Fix, ";\n") {
				if _, err := b.DB().Exec(q); err != nil {
					t.Fatalf("the fix %q: %v", q, err)
				}
			}
		}
		insertInto(t, b.DB(), table, 1)
		ev := inboxtest.NewEvents(t)
		sub, err = inbox.Subscribe(b, inbox.MustQueue[Job](table), func(context.Context, Job) error { return nil }, inbox.History(time.Hour), ev.Observe())
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
		ev.Wait("an ack", func(e []inbox.Event) bool { return len(e) == 1 && e[0].Outcome == inbox.Acked })
		if got := readHistory(t, b.DB(), table); len(got) != 1 {
			t.Fatalf("history holds %v, want the acked row", got)
		}
	})
}

func TestHistoryRefusesRetention(t *testing.T) {
	b := open(t, inboxtest.SQLite(t))
	_, err := inbox.Subscribe(b, inbox.MustQueue[Job]("jobs"), func(context.Context, Job) error { return nil }, inbox.History(0))
	if !errors.Is(err, inbox.ErrInvalid) || !strings.Contains(err.Error(), "History(0s)") {
		t.Fatalf("Subscribe with History(0) = %v, want ErrInvalid naming it", err)
	}
}

// While a key's row is in the history, a publish of the key (alone, in a
// batch, in the caller's transaction) writes nothing and returns
// ErrDuplicate with the acked row's id; once the prune removed it after
// the retention, the key is taken again.
func TestHistoryReservesKeys(t *testing.T) {
	eachPublishDB(t, func(t *testing.T, url string) {
		fc := fake()
		b := openKeyed(t, url, true, inbox.WithClock(fc))
		ctx := context.Background()
		if err := migrations.ApplyHistory(ctx, b.DB(), "jobs", "id", "invoice_key"); err != nil {
			t.Fatal(err)
		}
		q := inbox.MustQueue[Invoice]("jobs")
		first, err := inbox.Publish(ctx, b, q, Invoice{Payload: []byte("a"), Key: "inv-1"})
		if err != nil {
			t.Fatal(err)
		}
		ev := inboxtest.NewEvents(t)
		sub, err := inbox.Subscribe(b, q, func(context.Context, Invoice) error { return nil }, inbox.History(time.Hour), ev.Observe())
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
		ev.Wait("the ack", func(e []inbox.Event) bool { return len(e) == 1 })

		again, err := inbox.Publish(ctx, b, q, Invoice{Payload: []byte("b"), Key: "inv-1"})
		var de *inbox.DuplicateError
		if !errors.As(err, &de) || again != first || !de.Handled || de.IDs[0] != first {
			t.Fatalf("Publish of a handled key = %d, %v; want %d and a DuplicateError of the history", again, err, first)
		}
		ids, err := inbox.PublishMany(ctx, b, q, []Invoice{{Payload: []byte("c"), Key: "inv-1"}, {Payload: []byte("d"), Key: "inv-2"}})
		if !errors.Is(err, inbox.ErrDuplicate) || len(ids) != 2 || ids[0] != first || ids[1] == first {
			t.Fatalf("PublishMany = %v, %v; want [%d, a new id] and ErrDuplicate", ids, err, first)
		}
		tx, err := b.DB().Begin()
		if err != nil {
			t.Fatal(err)
		}
		inTx, err := inbox.PublishTx(ctx, b, tx, q, Invoice{Payload: []byte("e"), Key: "inv-1"})
		if !errors.Is(err, inbox.ErrDuplicate) || inTx != first {
			t.Fatalf("PublishTx of a handled key = %d, %v; want %d and ErrDuplicate", inTx, err, first)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		ev.Wait("inv-2's ack", func(e []inbox.Event) bool { return len(e) == 2 })
		if rs, err := inbox.NewOperator(b).Rows(ctx, inbox.QueueRef{Table: "jobs", Roles: map[inbox.Role]string{inbox.RoleID: "id", inbox.RoleLockedUntil: "locked_until", inbox.RolePayload: "payload", inbox.RoleKey: "invoice_key"}},
			inbox.RowFilter{States: []string{inbox.StateDone}, Key: "inv-1"}); err != nil || len(rs) != 1 || rs[0].ID != first {
			t.Fatalf("done rows of key inv-1: %+v, %v; want row %d", rs, err, first)
		}
		var queued int
		if err := b.DB().QueryRow("SELECT count(*) FROM jobs WHERE invoice_key = 'inv-1'").Scan(&queued); err != nil || queued != 0 {
			t.Fatalf("%d rows of inv-1 queued (%v), want none", queued, err)
		}

		// Past the retention the prune removes the history's rows: the
		// key is free.
		eventually(t, "the prune", func() bool {
			fc.Advance(time.Minute)
			return rowsOf(t, b.DB(), "jobs_history") == 0
		})
		later, err := inbox.Publish(ctx, b, q, Invoice{Payload: []byte("f"), Key: "inv-1"})
		if err != nil || later == first {
			t.Fatalf("Publish after the retention = %d, %v; want a new row", later, err)
		}
	})
}

// Publishes of keys whose rows are being acked at the same time never let
// a key be handled twice: each of its publishes meets the queued row or the
// history's. Every form, every database.
func TestHistoryKeysUnderAcks(t *testing.T) {
	eachFormDB(t, func(t *testing.T, form claim.Form, url string) {
		b := openKeyed(t, url, true)
		ctx := context.Background()
		if err := migrations.ApplyHistory(ctx, b.DB(), "jobs", "id", "invoice_key"); err != nil {
			t.Fatal(err)
		}
		q := inbox.MustQueue[Invoice]("jobs")
		const keys = 100
		var mu sync.Mutex
		handled := map[string]int{}
		done := make(chan struct{}, keys*4)
		sub, err := inbox.Subscribe(b, q, func(_ context.Context, inv Invoice) error {
			mu.Lock()
			handled[inv.Key]++
			mu.Unlock()
			done <- struct{}{}
			return nil
		}, inbox.History(time.Hour), inbox.Form(form), inbox.Workers(4))
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
		for pass := range 3 {
			for i := range keys {
				_, err := inbox.Publish(ctx, b, q, Invoice{Payload: []byte("p"), Key: fmt.Sprintf("k-%d", i)})
				if err != nil && !errors.Is(err, inbox.ErrDuplicate) {
					t.Fatalf("pass %d, key %d: %v", pass, i, err)
				}
			}
		}
		receiveN(t, done, keys, "handlings")
		eventually(t, "every row moved", func() bool { return rowsOf(t, b.DB(), "jobs") == 0 })
		mu.Lock()
		defer mu.Unlock()
		for k, n := range handled {
			if n != 1 {
				t.Errorf("key %s handled %d times, want once", k, n)
			}
		}
		if len(handled) != keys || rowsOf(t, b.DB(), "jobs_history") != keys {
			t.Fatalf("%d keys handled, %d history rows; want %d each", len(handled), rowsOf(t, b.DB(), "jobs_history"), keys)
		}
	})
}

// A transactional handler's ack moves the row in the handler's
// transaction: the effect and the history row commit together, and a
// handling that fails moves nothing. Every form, every database.
func TestHistoryHandleTx(t *testing.T) {
	eachFormDB(t, func(t *testing.T, form claim.Form, url string) {
		b := open(t, url)
		table := historyTable(t, b)
		if _, err := b.DB().Exec("CREATE TABLE " + table + "_effects (job BIGINT, attempt INT)"); err != nil {
			t.Fatal(err)
		}
		insertInto(t, b.DB(), table, 4)
		ev := inboxtest.NewEvents(t)
		sub, err := inbox.SubscribeTx(b, inbox.MustQueue[Job](table), func(ctx context.Context, tx *sql.Tx, j Job) error {
			if _, err := tx.ExecContext(ctx, sqlFor(b, "INSERT INTO "+table+"_effects (job, attempt) VALUES ($1, $2)"), j.ID, j.Attempts); err != nil {
				return err
			}
			if j.Attempts == 1 && j.ID%2 == 0 {
				return inbox.RetryAfter(time.Millisecond, errors.New("the mail server said no"))
			}
			return nil
		}, inbox.History(time.Hour), inbox.Form(form), inbox.Workers(2), ev.Observe())
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
		ev.Wait("every row acked", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Acked) == 4 })
		got := readHistory(t, b.DB(), table)
		for id := int64(1); id <= 4; id++ {
			want := 1
			if id%2 == 0 {
				want = 2
			}
			if r, ok := got[id]; !ok || r.attempts != want || strings.Contains(r.lastError.String, "the mail server said no") != (want == 2) {
				t.Errorf("row %d in the history: %+v (found %v), want attempts %d", id, r, ok, want)
			}
		}
		if n := rowsOf(t, b.DB(), table+"_effects"); n != 4 {
			t.Fatalf("%d effects kept, want one a row (the failed attempts' rolled back)", n)
		}
		if n := rowsOf(t, b.DB(), table); n != 0 {
			t.Fatalf("%d rows left queued", n)
		}
	})
}
