package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/internal/claim"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// depsTable makes a table of its own with its edges.
func depsTable(t *testing.T, b *inbox.Broker) string {
	t.Helper()
	table := ownTable(t, b)
	if err := migrations.ApplyDependencies(context.Background(), b.DB(), table, "id"); err != nil {
		t.Fatal(err)
	}
	return table
}

// publishP publishes a row of payload p, failing the test on an error.
func publishP(t *testing.T, b *inbox.Broker, q inbox.Queue[Job], p string, opts ...inbox.PublishOption) int64 {
	t.Helper()
	id, err := inbox.Publish(context.Background(), b, q, Job{Payload: []byte(p)}, opts...)
	if err != nil {
		t.Fatalf("publish %s: %v", p, err)
	}
	return id
}

// present counts which of ids are still rows of table.
func present(t *testing.T, db *sql.DB, table string, ids ...int64) int {
	t.Helper()
	n := 0
	for _, id := range ids {
		var c int
		if err := db.QueryRow(fmt.Sprintf("SELECT count(*) FROM %s WHERE id = %d", table, id)).Scan(&c); err != nil {
			t.Fatal(err)
		}
		n += c
	}
	return n
}

// lockedUntilSet says row id's locked_until is not NULL.
func lockedUntilSet(t *testing.T, db *sql.DB, table string, id int64) bool {
	t.Helper()
	var set int
	if err := db.QueryRow(fmt.Sprintf("SELECT count(*) FROM %s WHERE id = %d AND locked_until IS NOT NULL", table, id)).Scan(&set); err != nil {
		t.Fatal(err)
	}
	return set == 1
}

func edgesOf(t *testing.T, db *sql.DB, table string) int {
	t.Helper()
	var edges int
	if err := db.QueryRow("SELECT count(*) FROM " + table + "_deps").Scan(&edges); err != nil {
		t.Fatal(err)
	}
	return edges
}

// A diamond A -> (B, C) -> D: B and C start only once A was acked, D only
// once B and C were. Every form, every database.
func TestDepsDiamond(t *testing.T) {
	eachFormDB(t, func(t *testing.T, form claim.Form, url string) {
		b := open(t, url)
		table := depsTable(t, b)
		q := inbox.MustQueue[Job](table)
		a := publishP(t, b, q, "A")
		bb := publishP(t, b, q, "B", inbox.After(a))
		c := publishP(t, b, q, "C", inbox.After(a))
		d := publishP(t, b, q, "D", inbox.After(bb, c))
		for _, id := range []int64{bb, c, d} {
			if !lockedUntilSet(t, b.DB(), table, id) {
				t.Fatalf("row %d waits for its parents but its locked_until is NULL", id)
			}
		}
		before := map[string][]int64{"B": {a}, "C": {a}, "D": {a, bb, c}}
		var mu sync.Mutex
		var problems []string
		ev := inboxtest.NewEvents(t)
		sub, err := inbox.Subscribe(b, q, func(ctx context.Context, j Job) error {
			if n := present(t, b.DB(), table, before[string(j.Payload)]...); n > 0 {
				mu.Lock()
				problems = append(problems, fmt.Sprintf("%s started with %d of its ancestors not acked", j.Payload, n))
				mu.Unlock()
			}
			return nil
		}, inbox.Form(form), inbox.Workers(4), ev.Observe())
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
		ev.Wait("four acks", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Acked) == 4 })
		mu.Lock()
		defer mu.Unlock()
		if len(problems) > 0 {
			t.Fatal(strings.Join(problems, "; "))
		}
		if n := rowsOf(t, b.DB(), table); n != 0 {
			t.Fatalf("%d rows left", n)
		}
		// D's release (of no child) drops its own edges after its ack.
		eventually(t, "no edge left after every row was acked", func() bool { return edgesOf(t, b.DB(), table) == 0 })
	})
}

// A publish whose parents are all gone (acked) is available at once; a
// publish to a table without edges is refused, naming the migration.
func TestDepsParentGoneAndNoTable(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		b := open(t, url)
		table := depsTable(t, b)
		q := inbox.MustQueue[Job](table)
		id := publishP(t, b, q, "child", inbox.After(123456789))
		if lockedUntilSet(t, b.DB(), table, id) {
			t.Fatal("a row whose parent is gone waits")
		}
		plain := inbox.MustQueue[Job](ownTable(t, b))
		_, err := inbox.Publish(context.Background(), b, plain, Job{Payload: []byte("x")}, inbox.After(id))
		if err == nil || !strings.Contains(err.Error(), "migrations.ApplyDependencies") {
			t.Fatalf("publish with After to a table without edges: %v", err)
		}
		if _, err := inbox.Publish(context.Background(), b, q, Job{}, inbox.After(0)); !errors.Is(err, inbox.ErrInvalid) {
			t.Fatalf("After(0): %v", err)
		}
		if _, err := inbox.Publish(context.Background(), b, q, Job{}, inbox.IfParentParked(inbox.RunChild)); !errors.Is(err, inbox.ErrInvalid) {
			t.Fatalf("IfParentParked without After: %v", err)
		}
		if _, err := inbox.Publish(context.Background(), b, q, Job{}, inbox.After(id), inbox.Delay(1)); !errors.Is(err, inbox.ErrInvalid) {
			t.Fatalf("After with Delay: %v", err)
		}
	})
}

// A child published in its parent's HandleTx transaction commits with the
// parent's ack: a failed attempt leaves no child, the one that succeeds
// leaves one, written available (no release to wait for; in the lease form
// on Postgres leased to the subscription, which takes it with no claim),
// which runs after its parent. Every form, every database.
func TestDepsChildInHandleTx(t *testing.T) {
	eachFormDB(t, func(t *testing.T, form claim.Form, url string) {
		b := open(t, url)
		table := depsTable(t, b)
		q := inbox.MustQueue[Job](table)
		parent := publishP(t, b, q, "parent")
		adopted := 0
		if form.Name() == "lease" && b.Dialect() == "postgres" {
			adopted = 1
		}
		var mu sync.Mutex
		attempts := 0
		var children []int64
		childRan := make(chan int64, 4)
		ev := inboxtest.NewEvents(t)
		sub, err := inbox.SubscribeTx(b, q, func(ctx context.Context, tx *sql.Tx, j Job) error {
			if string(j.Payload) == "child" {
				var n int
				if err := tx.QueryRow(fmt.Sprintf("SELECT count(*) FROM %s WHERE id = %d", table, parent)).Scan(&n); err != nil || n != 0 {
					t.Errorf("the child ran before its parent was acked (%v)", err)
				}
				if p, ok := inbox.ParentsFrom(ctx); !ok || p.Acked != 1 || p.Parked != 0 {
					t.Errorf("ParentsFrom: %+v, %v; want one parent acked", p, ok)
				}
				childRan <- j.ID
				return nil
			}
			id, err := inbox.PublishTx(ctx, b, tx, q, Job{Payload: []byte("child")}, inbox.After(j.ID))
			if err != nil {
				return err
			}
			// The parent's ack commits with this transaction: the child is
			// written available, its edge acked, and needs no release; in
			// the lease form on Postgres it is written leased to this
			// subscription, its attempt counted, and taken at the commit.
			var waiting, tries, state int
			if err := tx.QueryRow(fmt.Sprintf("SELECT CASE WHEN locked_until IS NULL THEN 0 ELSE 1 END, attempts FROM %s WHERE id = %d", table, id)).Scan(&waiting, &tries); err != nil || waiting != adopted || tries != adopted {
				t.Errorf("the child of the row this transaction acks: leased %d, attempts %d (%v); want %d, %d", waiting, tries, err, adopted, adopted)
			}
			if err := tx.QueryRow(fmt.Sprintf("SELECT state FROM %s_deps WHERE child_id = %d", table, id)).Scan(&state); err != nil || state != dialect.EdgeAcked {
				t.Errorf("its edge's state %d (%v), want acked", state, err)
			}
			mu.Lock()
			defer mu.Unlock()
			attempts++
			children = append(children, id)
			if attempts == 1 {
				return inbox.RetryAfter(0, errors.New("first attempt fails"))
			}
			return nil
		}, inbox.Form(form), ev.Observe())
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
		receiveN(t, childRan, 1, "the child's handling")
		ev.Wait("two acks", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Acked) == 2 })
		mu.Lock()
		defer mu.Unlock()
		if attempts != 2 || present(t, b.DB(), table, children[0]) != 0 {
			t.Fatalf("attempts %d, children %v: the failed attempt's child must be rolled back", attempts, children)
		}
	})
}

// Children published in bulk (PublishManyTx) with After(the handled row)
// in its HandleTx are written available too, and run.
func TestDepsManyInHandleTx(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		b := open(t, url)
		table := depsTable(t, b)
		q := inbox.MustQueue[Job](table)
		publishP(t, b, q, "parent")
		childRan := make(chan int64, 3)
		sub, err := inbox.SubscribeTx(b, q, func(ctx context.Context, tx *sql.Tx, j Job) error {
			if string(j.Payload) == "child" {
				childRan <- j.ID
				return nil
			}
			kids := []Job{{Payload: []byte("child")}, {Payload: []byte("child")}, {Payload: []byte("child")}}
			ids, err := inbox.PublishManyTx(ctx, b, tx, q, kids, inbox.After(j.ID))
			if err != nil {
				return err
			}
			for _, id := range ids {
				var waiting int
				if err := tx.QueryRow(fmt.Sprintf("SELECT CASE WHEN locked_until IS NULL THEN 0 ELSE 1 END FROM %s WHERE id = %d", table, id)).Scan(&waiting); err != nil || waiting != 0 {
					t.Errorf("child %d of the row this transaction acks waits (%d, %v), want it available", id, waiting, err)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
		receiveN(t, childRan, 3, "the children's handlings")
	})
}

// A parked parent parks its children (recursively, the error naming the
// parent), runs those published with RunChild and deletes those with
// DeleteChild; a publish after the park applies the policy at once.
// Every form, every database.
func TestDepsParkedParentPolicies(t *testing.T) {
	eachFormDB(t, func(t *testing.T, form claim.Form, url string) {
		b := open(t, url)
		table := depsTable(t, b)
		q := inbox.MustQueue[Job](table)
		a := publishP(t, b, q, "A")
		park := publishP(t, b, q, "park", inbox.After(a))
		grand := publishP(t, b, q, "grand", inbox.After(park))
		publishP(t, b, q, "run", inbox.After(a), inbox.IfParentParked(inbox.RunChild))
		del := publishP(t, b, q, "del", inbox.After(a), inbox.IfParentParked(inbox.DeleteChild))
		ran := make(chan string, 8)
		var parents inbox.Parents
		ev := inboxtest.NewEvents(t)
		sub, err := inbox.Subscribe(b, q, func(ctx context.Context, j Job) error {
			if string(j.Payload) == "A" {
				return inbox.Park(errors.New("boom"))
			}
			if string(j.Payload) == "run" {
				parents, _ = inbox.ParentsFrom(ctx)
			}
			ran <- string(j.Payload)
			return nil
		}, inbox.Form(form), ev.Observe())
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
		if got := <-ran; got != "run" {
			t.Fatalf("%s ran; only the RunChild child may", got)
		}
		if parents != (inbox.Parents{Parked: 1}) {
			t.Fatalf("ParentsFrom: %+v, want one parked", parents)
		}
		wantParked := func(id int64, naming int64) {
			t.Helper()
			var lastErr sql.NullString
			eventually(t, fmt.Sprintf("row %d parked", id), func() bool {
				if err := b.DB().QueryRow(fmt.Sprintf("SELECT last_error FROM %s WHERE id = %d", table, id)).Scan(&lastErr); err != nil {
					t.Fatal(err)
				}
				return lastErr.Valid
			})
			if !strings.Contains(lastErr.String, fmt.Sprintf("parent %d parked", naming)) || !strings.Contains(lastErr.String, "boom") {
				t.Fatalf("row %d's last error %q does not name its parent %d and the error", id, lastErr.String, naming)
			}
			rs, err := inbox.NewOperator(b).Rows(context.Background(), inbox.QueueRef{Table: table, Roles: q.Roles()}, inbox.RowFilter{IDs: []int64{id}})
			if err != nil || len(rs) != 1 || rs[0].State != inbox.StateParked {
				t.Fatalf("row %d: %v %+v, want parked", id, err, rs)
			}
		}
		wantParked(park, a)
		wantParked(grand, park)
		eventually(t, "the DeleteChild child deleted", func() bool { return present(t, b.DB(), table, del) == 0 })
		// Published after the park: each policy at once.
		late := publishP(t, b, q, "late", inbox.After(a))
		wantParked(late, a)
		lateDel := publishP(t, b, q, "lateDel", inbox.After(a), inbox.IfParentParked(inbox.DeleteChild))
		if present(t, b.DB(), table, lateDel) != 0 {
			t.Fatal("a DeleteChild child of a parked parent was kept")
		}
		publishP(t, b, q, "run", inbox.After(a), inbox.IfParentParked(inbox.RunChild))
		if got := <-ran; got != "run" {
			t.Fatalf("%s ran; only the late RunChild child may", got)
		}
	})
}

// The sweep releases a child whose parent's ack committed without its
// release (a crash between the two: the parent deleted by plain SQL).
func TestDepsSweepReleasesStranded(t *testing.T) {
	sweepReleases(t, func(table string, parent int64) []string {
		return []string{fmt.Sprintf("DELETE FROM %s WHERE id = %d", table, parent)}
	})
}

// The sweep releases a child left waiting after its edges were marked: a
// kill between a release's mark and its unblock (separate statements on
// SQLite and MariaDB) leaves no edge pending, which the diamonds soak found
// on MariaDB. The state is written by plain SQL: the parent gone, its edge
// marked acked, the child waiting.
func TestDepsSweepReleasesMarkedButWaiting(t *testing.T) {
	sweepReleases(t, func(table string, parent int64) []string {
		return []string{
			fmt.Sprintf("UPDATE %s_deps SET state = %d WHERE parent_id = %d", table, dialect.EdgeAcked, parent),
			fmt.Sprintf("DELETE FROM %s WHERE id = %d", table, parent),
		}
	})
}

// sweepReleases publishes a parent and its child, leaves them in the state
// the statements of crash write, and waits for a subscription's sweep to
// release the child, on every database.
func sweepReleases(t *testing.T, crash func(table string, parent int64) []string) {
	eachDB(t, func(t *testing.T, url string) {
		b := open(t, url, inbox.PollInterval(20*time.Millisecond))
		table := depsTable(t, b)
		q := inbox.MustQueue[Job](table)
		p := publishP(t, b, q, "parent")
		c := publishP(t, b, q, "child", inbox.After(p))
		for _, stmt := range crash(table, p) {
			if _, err := b.DB().Exec(stmt); err != nil {
				t.Fatal(err)
			}
		}
		ran := make(chan int64, 1)
		sub, err := inbox.Subscribe(b, q, func(ctx context.Context, j Job) error { ran <- j.ID; return nil })
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
		select {
		case id := <-ran:
			if id != c {
				t.Fatalf("ran row %d, want the child %d", id, c)
			}
		case <-time.After(inboxtest.Timeout):
			t.Fatal("the sweep did not release the child")
		}
	})
}

// Parents acked at once by two pools (two processes) release their child
// exactly once, every time: each release's check runs after its own
// parent's ack committed. The poll (3 s) picks up a row whose wake was
// lost; the sweep runs at most every 15 s, after the 12 s a round may
// take, so a release lost to a race fails the test.
func TestDepsConcurrentAcksReleaseOnce(t *testing.T) {
	eachFormDB(t, func(t *testing.T, form claim.Form, url string) {
		if strings.HasPrefix(url, "file:") {
			t.Skip("SQLite has one writer: its releases never run side by side")
		}
		rounds := 40
		if testing.Short() {
			rounds = 10
		}
		b1 := open(t, url, inbox.PollInterval(3*time.Second))
		b2 := open(t, url, inbox.PollInterval(3*time.Second))
		table := depsTable(t, b1)
		q := inbox.MustQueue[Job](table)
		var mu sync.Mutex
		children := map[int64]int{}
		childRan := make(chan struct{}, rounds)
		type meeting struct {
			n   int
			met chan struct{}
		}
		var cur *meeting
		handler := func(ctx context.Context, j Job) error {
			if string(j.Payload) == "child" {
				mu.Lock()
				children[j.ID]++
				mu.Unlock()
				childRan <- struct{}{}
				return nil
			}
			// B and C in work at once, one in each pool, are acked
			// together. A claim may take both as spare rows: then the one
			// waits for a second that never comes, and goes on.
			mu.Lock()
			r := cur
			r.n++
			if r.n == 2 {
				close(r.met)
			}
			mu.Unlock()
			select {
			case <-r.met:
			case <-time.After(2 * time.Second):
			}
			return nil
		}
		for _, b := range []*inbox.Broker{b1, b2} {
			// A short lease: the row-lock form on Postgres at times left
			// the released child to the end of a claim's bridging lease
			// (its claims racing for it), about once in a hundred rounds.
			sub, err := inbox.Subscribe(b, q, handler, inbox.Form(form), inbox.Workers(1), inbox.Lease(3*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			inboxtest.RunSubscription(t, sub)
		}
		for range rounds {
			mu.Lock()
			cur = &meeting{met: make(chan struct{})}
			mu.Unlock()
			tx, err := b1.DB().Begin()
			if err != nil {
				t.Fatal(err)
			}
			pb, err := inbox.PublishTx(context.Background(), b1, tx, q, Job{Payload: []byte("B")})
			if err != nil {
				t.Fatal(err)
			}
			pc, err := inbox.PublishTx(context.Background(), b1, tx, q, Job{Payload: []byte("C")})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := inbox.PublishTx(context.Background(), b1, tx, q, Job{Payload: []byte("child")}, inbox.After(pb, pc)); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			b1.Wake(table, "")
			b2.Wake(table, "")
			select {
			case <-childRan:
			case <-time.After(12 * time.Second):
				st, _ := inbox.NewOperator(b1).State(context.Background(), inbox.QueueRef{Table: table, Roles: q.Roles()})
				var edges []string
				rs, err := b1.DB().Query("SELECT child_id, parent_id, state FROM " + table + "_deps")
				if err == nil {
					for rs.Next() {
						var c, p, s int64
						_ = rs.Scan(&c, &p, &s)
						edges = append(edges, fmt.Sprintf("%d<-%d:%d", c, p, s))
					}
					rs.Close()
				}
				t.Fatalf("the child of two parents acked at once did not run: rows %+v, edges %v", st, edges)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for id, n := range children {
			if n != 1 {
				t.Fatalf("child %d ran %d times", id, n)
			}
		}
		if len(children) != rounds {
			t.Fatalf("%d children ran of %d", len(children), rounds)
		}
	})
}

// A producer in plain SQL writes the three statements docs/workflows.md
// shows, in one transaction: the child at the waiting time, its edges to
// the parents still queued (locked), and the wait cleared when none is.
func TestDepsPlainSQLEdges(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		b := open(t, url)
		table := depsTable(t, b)
		q := inbox.MustQueue[Job](table)
		p := publishP(t, b, q, "parent")
		kind := b.Dialect()
		waiting := map[string]string{"sqlite": "'9000-01-01 00:00:00.000'", "postgres": "'9000-01-01 00:00:00+00'", "mysql": "'9000-01-01 00:00:00'"}[kind]
		lock := map[string]string{"sqlite": "", "postgres": " FOR KEY SHARE", "mysql": " LOCK IN SHARE MODE"}[kind]
		write := func(child int64, parents string) {
			t.Helper()
			tx, err := b.DB().Begin()
			if err != nil {
				t.Fatal(err)
			}
			for _, stmt := range []string{
				fmt.Sprintf("INSERT INTO %s (id, payload, locked_until) VALUES (%d, 'child', %s)", table, child, waiting),
				fmt.Sprintf("INSERT INTO %s_deps (child_id, parent_id) SELECT %d, id FROM %s WHERE id IN (%s)%s", table, child, table, parents, lock),
				fmt.Sprintf("UPDATE %s SET locked_until = NULL WHERE id = %d AND NOT EXISTS (SELECT 1 FROM %s_deps WHERE child_id = %d)", table, child, table, child),
			} {
				if _, err := tx.Exec(stmt); err != nil {
					t.Fatalf("%s: %v", stmt, err)
				}
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
		}
		write(p+1000, fmt.Sprintf("%d, %d", p, p+5000)) // one parent queued, one gone
		write(p+2000, fmt.Sprintf("%d", p+5000))        // its one parent gone: available
		rs, err := inbox.NewOperator(b).Rows(context.Background(), inbox.QueueRef{Table: table, Roles: q.Roles()}, inbox.RowFilter{IDs: []int64{p + 1000, p + 2000}})
		if err != nil || len(rs) != 2 || rs[0].State != inbox.StateWaiting || rs[1].State != inbox.StateAvailable {
			t.Fatalf("the plain-SQL children: %v %+v, want waiting and available", err, rs)
		}
		ran := make(chan int64, 3)
		sub, err := inbox.Subscribe(b, q, func(ctx context.Context, j Job) error { ran <- j.ID; return nil }, inbox.Workers(1))
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
		var order []int64
		for range 3 {
			order = append(order, <-ran)
		}
		if i := slices.Index(order, p+1000); i < slices.Index(order, p) {
			t.Fatalf("ran %v: the waiting child before its parent", order)
		}
	})
}

// A row of twelve parents (a batch's callback) reads how many were acked
// and how many parked, and runs once all are settled (RunChild).
func TestDepsParentsFromMany(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		b := open(t, url)
		table := depsTable(t, b)
		q := inbox.MustQueue[Job](table)
		var parents []int64
		for i := range 12 {
			p := "ok"
			if i%4 == 0 {
				p = "fail"
			}
			parents = append(parents, publishP(t, b, q, p))
		}
		publishP(t, b, q, "callback", inbox.After(parents...), inbox.IfParentParked(inbox.RunChild))
		got := make(chan inbox.Parents, 1)
		sub, err := inbox.Subscribe(b, q, func(ctx context.Context, j Job) error {
			switch string(j.Payload) {
			case "fail":
				return inbox.Park(errors.New("failed"))
			case "callback":
				p, ok := inbox.ParentsFrom(ctx)
				if !ok {
					t.Error("ParentsFrom: no parents")
				}
				got <- p
			}
			return nil
		}, inbox.Workers(4))
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
		select {
		case p := <-got:
			if p != (inbox.Parents{Acked: 9, Parked: 3}) {
				t.Fatalf("ParentsFrom: %+v, want 9 acked and 3 parked", p)
			}
		case <-time.After(inboxtest.Timeout):
			t.Fatal("the callback did not run")
		}
	})
}

// An operator's delete of a waiting row deletes its edges as child too; a
// delete on a table without edges is unchanged (TestOperator*).
func TestDepsOperatorDeleteDropsEdges(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		b := open(t, url)
		table := depsTable(t, b)
		q := inbox.MustQueue[Job](table)
		parent := publishP(t, b, q, "parent", inbox.Delay(24*time.Hour))
		child := publishP(t, b, q, "child", inbox.After(parent))
		other := publishP(t, b, q, "other", inbox.After(parent))
		if n := edgesOf(t, b.DB(), table); n != 2 {
			t.Fatalf("%d edges after two publishes with After, want 2", n)
		}
		op := inbox.NewOperator(b)
		ref := inbox.QueueRef{Table: table}
		n, err := op.Delete(context.Background(), ref, inbox.Selection{IDs: []int64{child}})
		if err != nil || n != 1 {
			t.Fatalf("delete of the waiting row: %d, %v", n, err)
		}
		if n := edgesOf(t, b.DB(), table); n != 1 {
			t.Fatalf("%d edges after the waiting row's delete, want 1 (the other child's)", n)
		}
		if present(t, b.DB(), table, parent, other) != 2 {
			t.Fatal("the delete took rows it was not given")
		}
	})
}

// A cancel of a waiting row stops it at once, as a row not in work: parked
// with the cancel as its last error, or deleted with its edges as child.
func TestDepsCancelWaitingRow(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		b := open(t, url)
		if err := migrations.ApplyRegistry(context.Background(), b.DB()); err != nil {
			t.Fatal(err)
		}
		table := depsTable(t, b)
		q := inbox.MustQueue[Job](table)
		parent := publishP(t, b, q, "parent", inbox.Delay(24*time.Hour))
		parked := publishP(t, b, q, "parked", inbox.After(parent))
		deleted := publishP(t, b, q, "deleted", inbox.After(parent))
		op := inbox.NewOperator(b)
		ref := inbox.QueueRef{Table: table}
		ctx := context.Background()
		res, err := op.Cancel(ctx, ref, []int64{parked}, inbox.CancelOptions{Reason: "not needed"})
		if err != nil || res.Stopped != 1 || res.InWork != 0 {
			t.Fatalf("cancel of a waiting row: %+v, %v; want it stopped at once", res, err)
		}
		rows, err := op.Rows(ctx, ref, inbox.RowFilter{IDs: []int64{parked}})
		if err != nil || len(rows) != 1 || rows[0].State != inbox.StateParked || !strings.Contains(rows[0].LastError, "not needed") {
			t.Fatalf("the canceled waiting row: %+v, %v; want it parked with the cancel's reason", rows, err)
		}
		res, err = op.Cancel(ctx, ref, []int64{deleted}, inbox.CancelOptions{Delete: true})
		if err != nil || res.Stopped != 1 {
			t.Fatalf("cancel and delete of a waiting row: %+v, %v", res, err)
		}
		if present(t, b.DB(), table, deleted) != 0 {
			t.Fatal("the row canceled with Delete is still there")
		}
		if n := edgesOf(t, b.DB(), table); n != 1 {
			t.Fatalf("%d edges after the cancel with Delete, want 1 (the parked row's)", n)
		}
	})
}

// On Postgres, a step that publishes the next with After(itself) in its
// HandleTx drops its own edge (as a child) in that publish's statement:
// inside the transaction the edge is gone, so the release after the
// commit has nothing to write. Each form; the chain of three steps runs,
// and leaves no edge.
func TestDepsHandOffDropsOwnEdges(t *testing.T) {
	for _, c := range everyFormDB {
		if c.db != "postgres" {
			continue
		}
		form := c.form
		t.Run(form.Name(), func(t *testing.T) {
			t.Parallel()
			b := open(t, inboxtest.Postgres(t))
			table := depsTable(t, b)
			q := inbox.MustQueue[Job](table)
			publishP(t, b, q, "step")
			ev := inboxtest.NewEvents(t)
			sub, err := inbox.SubscribeTx(b, q, func(ctx context.Context, tx *sql.Tx, j Job) error {
				if string(j.Payload) == "last" {
					return nil
				}
				next := "step"
				var own int
				if err := tx.QueryRow(fmt.Sprintf("SELECT count(*) FROM %s_deps WHERE child_id = %d", table, j.ID)).Scan(&own); err != nil {
					return err
				}
				if own > 0 {
					next = "last"
				}
				if _, err := inbox.PublishTx(ctx, b, tx, q, Job{Payload: []byte(next)}, inbox.After(j.ID)); err != nil {
					return err
				}
				if err := tx.QueryRow(fmt.Sprintf("SELECT count(*) FROM %s_deps WHERE child_id = %d", table, j.ID)).Scan(&own); err != nil || own != 0 {
					t.Errorf("row %d: %d edges of its own after it published its next step in its transaction (%v), want 0", j.ID, own, err)
				}
				return nil
			}, inbox.Form(form), ev.Observe())
			if err != nil {
				t.Fatal(err)
			}
			inboxtest.RunSubscription(t, sub)
			ev.Wait("the chain's three acks", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Acked) == 3 })
			if n := edgesOf(t, b.DB(), table); n != 0 {
				t.Fatalf("%d edges left after the chain, want 0", n)
			}
		})
	}
}

// A row with a child published earlier (waiting) that hands off to a step
// in its HandleTx: its settlement no longer waits for its release, and the
// release, made after it, still frees the earlier child. Every form, every
// database.
func TestDepsHandOffBesideAnEarlierChild(t *testing.T) {
	eachFormDB(t, func(t *testing.T, form claim.Form, url string) {
		b := open(t, url)
		table := depsTable(t, b)
		q := inbox.MustQueue[Job](table)
		parent := publishP(t, b, q, "parent")
		earlier := publishP(t, b, q, "earlier", inbox.After(parent))
		ran := make(chan string, 4)
		sub, err := inbox.SubscribeTx(b, q, func(ctx context.Context, tx *sql.Tx, j Job) error {
			if string(j.Payload) != "parent" {
				if p, ok := inbox.ParentsFrom(ctx); !ok || p.Acked != 1 || p.Parked != 0 {
					t.Errorf("%s: ParentsFrom %+v, %v; want one parent acked", j.Payload, p, ok)
				}
				ran <- string(j.Payload)
				return nil
			}
			_, err := inbox.PublishTx(ctx, b, tx, q, Job{Payload: []byte("step")}, inbox.After(j.ID))
			return err
		}, inbox.Form(form), inbox.Workers(2))
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
		got := []string{}
		for range 2 {
			select {
			case p := <-ran:
				got = append(got, p)
			case <-time.After(15 * time.Second):
				t.Fatalf("ran %v in 15 s; want the step and the earlier child (row %d)", got, earlier)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, []string{"earlier", "step"}) {
			t.Fatalf("ran %v, want the earlier child and the step once each", got)
		}
	})
}

// A step its HandleTx publishes After the handled row alone is written
// leased to the subscription (lease form, Postgres), its attempt counted,
// and taken by the worker that made it with no claim: a chain of steps
// runs each step once, in order, on one claim and no wake; its lease is
// the one the acks are fenced on, on the host's clock and on the
// database's (with notifications, which the step's insert sends none of).
func TestDepsStepAdopted(t *testing.T) {
	for _, c := range []struct {
		name    string
		workers int
		opts    []inbox.Option
	}{
		{"workers=1", 1, nil},
		{"workers=4/database-clock/notify", 4, []inbox.Option{inbox.WithClock(clock.Database{}), inbox.ListenNotify()}},
	} {
		workers := c.workers
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := open(t, inboxtest.Postgres(t), c.opts...)
			q := inbox.MustQueue[Job](depsTable(t, b))
			const steps = 40
			type ran struct{ step, attempts int }
			got := make(chan ran, steps+1)
			sub, err := inbox.SubscribeTx(b, q, func(ctx context.Context, tx *sql.Tx, j Job) error {
				n, _ := strconv.Atoi(string(j.Payload))
				got <- ran{n, j.Attempts}
				if n == steps {
					return nil
				}
				_, err := inbox.PublishTx(ctx, b, tx, q, Job{Payload: []byte(strconv.Itoa(n + 1))}, inbox.After(j.ID))
				return err
			}, inbox.Workers(workers))
			if err != nil {
				t.Fatal(err)
			}
			publishP(t, b, q, "1")
			stop := inboxtest.RunSubscription(t, sub)
			for i := 1; i <= steps; i++ {
				select {
				case r := <-got:
					if r.step != i || r.attempts != 1 {
						t.Fatalf("handled step %d at attempt %d, want step %d at attempt 1", r.step, r.attempts, i)
					}
				case <-time.After(inboxtest.Timeout):
					t.Fatalf("step %d did not run", i)
				}
			}
			stop()
			st := sub.Stats()
			t.Logf("%d steps: %d claim statements, %d rows claimed or adopted", steps, st.Claims, st.Claimed)
			if st.Claimed != steps || st.Acked != steps {
				t.Errorf("claimed %d, acked %d; want %d each", st.Claimed, st.Acked, steps)
			}
			if st.Claims > steps/4 {
				t.Errorf("%d claim statements for %d steps: the steps were claimed, not adopted", st.Claims, steps)
			}
			select {
			case r := <-got:
				t.Errorf("step %d ran twice", r.step)
			default:
			}
		})
	}
}

// A step adopted as its subscription stops is given back, its attempt
// returned: the next subscription claims it and handles it once.
func TestDepsStepAdoptedAtStop(t *testing.T) {
	b := open(t, inboxtest.Postgres(t))
	table := depsTable(t, b)
	q := inbox.MustQueue[Job](table)
	publishP(t, b, q, "parent")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var child atomic.Int64
	sub, err := inbox.SubscribeTx(b, q, func(hctx context.Context, tx *sql.Tx, j Job) error {
		if string(j.Payload) != "parent" {
			t.Errorf("the first subscription handled %q after its stop", j.Payload)
			return nil
		}
		id, err := inbox.PublishTx(hctx, b, tx, q, Job{Payload: []byte("child")}, inbox.After(j.ID))
		child.Store(id)
		cancel() // the subscription stops while this handler runs
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Run(ctx); err != nil {
		t.Fatal(err)
	}
	var attempts int
	var leased bool
	if err := b.DB().QueryRow(fmt.Sprintf("SELECT attempts, COALESCE(locked_until > now(), false) FROM %s WHERE id = $1", table), child.Load()).Scan(&attempts, &leased); err != nil {
		t.Fatal(err)
	}
	if attempts != 0 || leased {
		t.Fatalf("the step adopted at the stop: attempts %d, leased %v; want it given back (0, false)", attempts, leased)
	}
	ran := make(chan Job, 2)
	next, err := inbox.Subscribe(b, q, func(_ context.Context, j Job) error { ran <- j; return nil })
	if err != nil {
		t.Fatal(err)
	}
	inboxtest.RunSubscription(t, next)
	select {
	case j := <-ran:
		if j.ID != child.Load() || j.Attempts != 1 {
			t.Fatalf("handled row %d at attempt %d, want the step %d at attempt 1", j.ID, j.Attempts, child.Load())
		}
	case <-time.After(inboxtest.Timeout):
		t.Fatal("the step given back at the stop did not run")
	}
}
