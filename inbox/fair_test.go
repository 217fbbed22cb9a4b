package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/claim"
	"github.com/sqlinbox/sqlinbox/claim/advisory"
	"github.com/sqlinbox/sqlinbox/claim/lease"
	"github.com/sqlinbox/sqlinbox/claim/rowlock"
	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// fairBacklog is the rows of group A published before group B's.
const fairBacklog = 100_000

// fairWorkers is each fairness run's workers, and so the most rows one
// claim takes.
const fairWorkers = 8

// TestFairByBacklogDelaysAnotherKeyByOneClaim publishes 100 rows of group B
// on an empty table, then again behind 100k rows of group A, to one
// subscription with FairBy on the group column, and holds B's p99 wait
// (publish to handler start) behind the backlog to twice its wait on the
// empty table plus one claim's worth of A's rows, on every database and
// form. Outside -short and the race detector it also logs B's waits
// without FairBy, behind the whole backlog.
func TestFairByBacklogDelaysAnotherKeyByOneClaim(t *testing.T) {
	// One database after the other: a drain of 100k rows on one would
	// take the CPU from the waits measured on another.
	for _, db := range []struct {
		name string
		url  func(testing.TB) string
	}{{"sqlite", inboxtest.SQLite}, {"postgres", inboxtest.Postgres}, {"mysql", inboxtest.MySQL}} {
		t.Run(db.name, func(t *testing.T) { fairWaitsEveryForm(t, db.url(t)) })
	}
}

// fairWaitsEveryForm runs fairWaits in every form url's database serves.
func fairWaitsEveryForm(t *testing.T, url string) {
	forms := []claim.Form{lease.Form}
	if !strings.HasPrefix(url, "sqlite:") {
		forms = append(forms, rowlock.Form, advisory.Form)
	}
	for _, form := range forms {
		t.Run(form.Name(), func(t *testing.T) { fairWaits(t, url, form, inbox.FairBy("group_name")) })
	}
	if !testing.Short() && !raceDetector {
		// What B waits without FairBy: the backlog drained before it.
		t.Run("lease without FairBy", func(t *testing.T) { fairWaits(t, url, lease.Form) })
	}
}

// tables numbers the tables freshTable makes.
var tables atomic.Int64

// freshTable makes a reference table of its own on b's database: a table
// that just lost 100k rows is not an empty table yet (on MariaDB, after a
// DELETE of 100k rows, B's waits there were 11 s).
func freshTable(t *testing.T, b *inbox.Broker) string {
	t.Helper()
	name := fmt.Sprintf("fair_%d", tables.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := migrations.Apply(ctx, b.DB(), name); err != nil {
		t.Fatal(err)
	}
	return name
}

// fairRun is one subscription whose handler notes when each row started.
type fairRun struct {
	mu      sync.Mutex
	started map[int64]time.Time
	groups  map[string]int
	table   string
	twice   []int64 // rows handled a second time
	handled chan string
}

func (r *fairRun) handle(_ context.Context, j Job) error {
	r.mu.Lock()
	if _, again := r.started[j.ID]; again {
		r.twice = append(r.twice, j.ID)
		r.mu.Unlock()
		return errors.New("handled twice")
	}
	r.started[j.ID] = time.Now()
	r.groups[j.Group]++
	r.mu.Unlock()
	select {
	case r.handled <- j.Group:
	default:
	}
	return nil
}

// publishB publishes 100 rows of group B one after the other and returns
// each row's wait from its publish to its handler's start, sorted, once all
// have started.
func (r *fairRun) publishB(t *testing.T, b *inbox.Broker) []time.Duration {
	t.Helper()
	ctx := context.Background()
	q := inbox.MustQueue[Job](r.table).Group("B")
	sent := map[int64]time.Time{}
	for range 100 {
		at := time.Now()
		id, err := inbox.Publish(ctx, b, q, Job{Payload: []byte("b")})
		if err != nil {
			t.Fatal(err)
		}
		sent[id] = at
	}
	deadline := time.After(60 * time.Second)
	for {
		r.mu.Lock()
		var waits []time.Duration
		for id, at := range sent {
			if s, ok := r.started[id]; ok {
				waits = append(waits, s.Sub(at))
			}
		}
		r.mu.Unlock()
		if len(waits) == len(sent) {
			slices.Sort(waits)
			return waits
		}
		select {
		case <-r.handled:
		case <-time.After(10 * time.Millisecond):
		case <-deadline:
			t.Fatalf("%d of %d rows of B started within 60s", len(waits), len(sent))
		}
	}
}

func (r *fairRun) count(group string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.groups[group]
}

func fairWaits(t *testing.T, url string, form claim.Form, fair ...inbox.SubOption) {
	b := open(t, url, inbox.MaxConns(fairWorkers+4))
	table := freshTable(t, b)
	r := &fairRun{started: map[int64]time.Time{}, groups: map[string]int{}, table: table, handled: make(chan string, 1)}
	sub, err := inbox.Subscribe(b, inbox.MustQueue[Job](table), r.handle,
		append(fair, inbox.Form(form), inbox.Workers(fairWorkers))...)
	if err != nil {
		t.Fatal(err)
	}
	inboxtest.RunSubscription(t, sub)
	empty := r.publishB(t, b)

	fill := "INSERT INTO " + table + ` (payload, group_name) WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 1000) SELECT 'a', 'A' FROM s AS x, s AS y WHERE y.i <= 100`
	if _, err := b.DB().Exec(fill); err != nil {
		t.Fatal(err)
	}
	b.Wake(table, "")
	// B's rows go in once A's drain runs at its pace.
	for r.count("A") < 1000 {
		select {
		case <-r.handled:
		case <-time.After(60 * time.Second):
			t.Fatalf("%d rows of A handled within 60s", r.count("A"))
		}
	}
	from, fromA, fromClaims := time.Now(), r.count("A"), sub.Stats().Claims
	behind := r.publishB(t, b)
	took, drained, claims := time.Since(from), r.count("A")-fromA, sub.Stats().Claims-fromClaims
	if left := fairBacklog - r.count("A"); len(fair) > 0 && left < fairBacklog/2 {
		t.Fatalf("only %d rows of A were left when B's last row started: the backlog was not behind B's rows", left)
	}
	// One claim's worth of work: the rows a claim took meanwhile (spare
	// rows beyond the free workers among them), at the pace they drained.
	oneClaim := took / time.Duration(max(claims, 1))
	p99 := func(w []time.Duration) time.Duration { return w[len(w)*99/100] }
	bound := 2*p99(empty) + oneClaim
	t.Logf("%s %s: B's waits on an empty table p50 %v p99 %v; behind %d rows of A p50 %v p99 %v (bound 2x+one claim %v); A drained %d rows at %.0f rows/s meanwhile, %d claims",
		b.Dialect(), form.Name(), empty[50], p99(empty), fairBacklog, behind[50], p99(behind), bound, drained, float64(drained)/took.Seconds(), claims)
	// The bound plus a margin for a shared, loaded machine.
	r.mu.Lock()
	if len(r.twice) > 0 {
		t.Errorf("rows handled twice: %v", r.twice)
	}
	r.mu.Unlock()
	if len(fair) > 0 && p99(behind) > bound+time.Second {
		t.Errorf("B's p99 wait behind the backlog %v, over 2 x %v + one claim %v (+1s)", p99(behind), p99(empty), oneClaim)
	}
}

// TestFairByDrainRate drains the same rows with and without FairBy, over
// one key and over 100, three times each in turns, and logs the median
// drain rates and their ratio: what the probe for the next key and claims
// of one key at a time cost.
func TestFairByDrainRate(t *testing.T) {
	if testing.Short() || raceDetector {
		t.Skip("drains 12 x 10k rows a database, and measures nothing under -short or the race detector")
	}
	eachDB(t, func(t *testing.T, url string) {
		for _, keys := range []int{1, 100} {
			var plain, fair []float64
			for range 3 {
				plain = append(plain, drainRate(t, url, keys))
				fair = append(fair, drainRate(t, url, keys, inbox.FairBy("group_name")))
			}
			slices.Sort(plain)
			slices.Sort(fair)
			t.Logf("%s, %d keys: median %.0f rows/s without FairBy %.0f, with %.0f %.0f (%.2fx)", strings.SplitN(url, ":", 2)[0], keys, plain[1], plain, fair[1], fair, fair[1]/plain[1])
			if fair[1] < plain[1]/10 {
				t.Errorf("%d keys: FairBy drained at %.0f rows/s, under a tenth of %.0f without it", keys, fair[1], plain[1])
			}
		}
	})
}

// drainRate publishes 10k rows over keys groups, then drains them with 8
// workers and returns the rows handled a second.
func drainRate(t *testing.T, url string, keys int, opts ...inbox.SubOption) float64 {
	t.Helper()
	const n = 10_000
	b := open(t, url, inbox.MaxConns(fairWorkers+4))
	table := freshTable(t, b)
	key := fmt.Sprintf("'k' || (x.i %% %d)", keys)
	if b.Dialect() == "mysql" {
		key = fmt.Sprintf("CONCAT('k', x.i %% %d)", keys)
	}
	fill := fmt.Sprintf("INSERT INTO %s (payload, group_name) WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 200) SELECT 'a', %s FROM s AS x, s AS y WHERE y.i <= 50", table, key)
	if _, err := b.DB().Exec(fill); err != nil {
		t.Fatal(err)
	}
	var done sync.WaitGroup
	done.Add(n)
	sub, err := inbox.Subscribe(b, inbox.MustQueue[Job](table), func(context.Context, Job) error { return nil },
		append(opts, inbox.Workers(fairWorkers), inbox.Observe(func(e inbox.Event) {
			if e.Outcome == inbox.Acked {
				done.Done()
			}
		}))...)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	stop := inboxtest.RunSubscription(t, sub)
	done.Wait()
	took := time.Since(start)
	stop()
	return n / took.Seconds()
}

// TestFairByTableCheck: FairBy's column must exist, be NOT NULL and lead an
// index with the id; the check names each problem with its DDL, the DDL
// run as printed makes the table pass, and a bad name or a queue of one
// group is refused at Subscribe.
func TestFairByTableCheck(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		b := open(t, url)
		q := inbox.MustQueue[Job]("jobs")
		nop := func(context.Context, Job) error { return nil }
		runErr := func(sub *inbox.Subscription) error {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			return sub.Run(ctx)
		}
		for _, bad := range []inbox.SubOption{inbox.FairBy("tenant; DROP TABLE jobs"), inbox.FairBy("")} {
			if _, err := inbox.Subscribe(b, q, nop, bad); !errors.Is(err, inbox.ErrInvalid) {
				t.Errorf("FairBy with a bad name: %v, want ErrInvalid", err)
			}
		}
		if _, err := inbox.Subscribe(b, q.Group("eu"), nop, inbox.FairBy("group_name")); !errors.Is(err, inbox.ErrInvalid) || !strings.Contains(err.Error(), "whole table") {
			t.Errorf("FairBy on a group's queue: %v, want ErrInvalid saying to subscribe to the whole table", err)
		}

		sub, err := inbox.Subscribe(b, q, nop, inbox.FairBy("tenant"))
		if err != nil {
			t.Fatal(err)
		}
		var te *inbox.TableError
		if err := runErr(sub); !errors.As(err, &te) || te.Column != "tenant" || !strings.Contains(te.Fix, "ADD COLUMN") {
			t.Fatalf("FairBy on a missing column: %v, want a TableError on column tenant with its ADD COLUMN", err)
		}
		add := quotedFor(b, `ALTER TABLE jobs ADD COLUMN tenant TEXT`)
		if b.Dialect() == "mysql" {
			add = "ALTER TABLE jobs ADD COLUMN tenant VARCHAR(64)"
		}
		if _, err := b.DB().Exec(add); err != nil {
			t.Fatal(err)
		}
		if _, err := b.DB().Exec(sqlFor(b, "INSERT INTO jobs (payload) VALUES ('no tenant')")); err != nil {
			t.Fatal(err)
		}
		sub, err = inbox.Subscribe(b, q, nop, inbox.FairBy("tenant"))
		if err != nil {
			t.Fatal(err)
		}
		err = runErr(sub)
		if !errors.As(err, &te) || len(te.Problems) != 2 || !strings.Contains(err.Error(), "NOT NULL") || !strings.Contains(err.Error(), "CREATE INDEX") {
			t.Fatalf("FairBy on a nullable column without an index: %v, want a TableError asking for NOT NULL and the index", err)
		}
		t.Log(err)
		for _, p := range te.Problems {
			stmts := []string{p.Fix}
			if b.Dialect() == "mysql" {
				stmts = strings.Split(p.Fix, "; ")
			}
			for _, s := range stmts {
				if _, err := b.DB().Exec(s); err != nil {
					t.Fatalf("the fix for %q fails as printed: %v\n%s", p.Problem, err, p.Fix)
				}
			}
		}
		ev := inboxtest.NewEvents(t)
		sub, err = inbox.Subscribe(b, q, nop, inbox.FairBy("tenant"), ev.Observe())
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
		ev.Wait("the row without a tenant, filled by the fix, acked", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Acked) == 1 })
	})
}

// Tenant is a row of a table with an integer tenant column and priorities.
type Tenant struct {
	ID          int64      `db:"id" inbox:"id,generated"`
	LockedUntil *time.Time `db:"locked_until" inbox:"locked_until"`
	Payload     []byte     `db:"payload" inbox:"payload"`
	Priority    int16      `db:"priority" inbox:"priority"`
	Customer    int64      `db:"customer_id"`
}

// TestFairByIntegerColumnAndPriorities: FairBy over an integer column of a
// table with priorities asks for the index (column, priority, id), then
// takes each customer's rows by priority, customers in turn, on every form.
func TestFairByIntegerColumnAndPriorities(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		forms := []claim.Form{lease.Form}
		if !strings.HasPrefix(url, "sqlite:") {
			forms = append(forms, rowlock.Form, advisory.Form)
		}
		b := openPriority(t, url, true)
		if _, err := b.DB().Exec("ALTER TABLE jobs ADD COLUMN customer_id integer NOT NULL DEFAULT 0"); err != nil {
			t.Fatal(err)
		}
		q := inbox.MustQueue[Tenant]("jobs")
		var mu sync.Mutex
		var order []Tenant
		handle := func(_ context.Context, j Tenant) error {
			mu.Lock()
			order = append(order, j)
			mu.Unlock()
			return nil
		}
		sub, err := inbox.Subscribe(b, q, handle, inbox.FairBy("customer_id"))
		if err != nil {
			t.Fatal(err)
		}
		var te *inbox.TableError
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := sub.Run(ctx); !errors.As(err, &te) || !strings.Contains(te.Fix, "customer_id") || !strings.Contains(te.Fix, "priority") {
			t.Fatalf("FairBy on a table with priorities and no (customer_id, priority, id) index: %v", err)
		}
		if _, err := b.DB().Exec(te.Fix); err != nil {
			t.Fatal(err)
		}
		for _, form := range forms {
			t.Run(form.Name(), func(t *testing.T) {
				mu.Lock()
				order = nil
				mu.Unlock()
				// Customer 1 has nine rows, 2 and 3 one each; priorities
				// run against the ids within customer 1.
				for i := range 9 {
					if _, err := inbox.Publish(ctx, b, q, Tenant{Customer: 1, Priority: int16(9 - i), Payload: []byte("p")}); err != nil {
						t.Fatal(err)
					}
				}
				for _, c := range []int64{2, 3} {
					if _, err := inbox.Publish(ctx, b, q, Tenant{Customer: c, Priority: 5, Payload: []byte("p")}); err != nil {
						t.Fatal(err)
					}
				}
				ev := inboxtest.NewEvents(t)
				sub, err := inbox.Subscribe(b, q, handle, inbox.FairBy("customer_id"), inbox.Form(form), ev.Observe())
				if err != nil {
					t.Fatal(err)
				}
				stop := inboxtest.RunSubscription(t, sub)
				ev.Wait("11 rows acked", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Acked) == 11 })
				stop()
				mu.Lock()
				defer mu.Unlock()
				var ones []int16
				for i, j := range order {
					if j.Customer == 1 {
						ones = append(ones, j.Priority)
					} else if i > 3 {
						t.Errorf("customer %d's row handled %d-th, behind customer 1's rows: %v", j.Customer, i+1, order)
					}
				}
				if !slices.IsSorted(ones) || len(ones) != 9 {
					t.Errorf("customer 1's priorities in the order handled: %v, want 1 to 9", ones)
				}
			})
		}
	})
}
