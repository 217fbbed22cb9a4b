package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/internal/claim"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// unsettled counts the rows of ids still in table and not parked (a
// parked row keeps its last error; MaxAttempts(1) parks at the first
// failure).
func unsettled(t *testing.T, b *inbox.Broker, table string, ids []int64) int {
	t.Helper()
	var n int
	list := strings.Trim(strings.Join(strings.Fields(fmt.Sprint(ids)), ","), "[]")
	if err := b.DB().QueryRow(fmt.Sprintf("SELECT count(*) FROM %s WHERE id IN (%s) AND last_error IS NULL", table, list)).Scan(&n); err != nil {
		t.Error(err)
	}
	return n
}

// callbacks records the callback handlings of a test's batches.
type callbacks struct {
	mu   sync.Mutex
	runs map[string]int           // by callback payload
	got  map[string]inbox.Parents // what ParentsFrom read
	ran  chan string
}

func newCallbacks(n int) *callbacks {
	return &callbacks{runs: map[string]int{}, got: map[string]inbox.Parents{}, ran: make(chan string, 2*n)}
}

func (c *callbacks) record(ctx context.Context, payload string) {
	p, ok := inbox.ParentsFrom(ctx)
	c.mu.Lock()
	c.runs[payload]++
	if ok {
		c.got[payload] = p
	}
	c.mu.Unlock()
	c.ran <- payload
}

// check fails the test unless each callback of want ran once, with the
// counts want gives.
func (c *callbacks) check(t *testing.T, want map[string]inbox.Parents) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for cb, w := range want {
		if c.runs[cb] != 1 || c.got[cb] != w {
			t.Errorf("callback %s ran %d times with %+v, want once with %+v", cb, c.runs[cb], c.got[cb], w)
		}
	}
	if len(c.runs) != len(want) {
		t.Errorf("%d callbacks ran, want %d", len(c.runs), len(want))
	}
}

// 1000 rows in batches of 10, some of whose handlers fail and are parked
// (MaxAttempts 1): each batch's callback runs once, after its ten rows
// were settled, and reads how many were acked and parked. Half the
// batches are published with PublishBatch, half with PublishBatchTx.
// Every form, every database.
func TestBatchCallbackOnce(t *testing.T) {
	eachFormDB(t, func(t *testing.T, form claim.Form, url string) {
		const batches, size = 100, 10
		b := open(t, url)
		table := depsTable(t, b)
		q := inbox.MustQueue[Job](table).Group("rows")
		done := q.Group("done")
		ctx := context.Background()
		want := map[string]inbox.Parents{}
		members := map[string][]int64{}
		for i := range batches {
			rows := make([]Job, size)
			var w inbox.Parents
			for j := range rows {
				p := fmt.Sprintf("b%d-%d", i, j)
				if (i+j)%7 == 0 {
					p += "-fail"
					w.Parked++
				} else {
					w.Acked++
				}
				rows[j].Payload = []byte(p)
			}
			cb := fmt.Sprintf("cb%d", i)
			want[cb] = w
			var out inbox.Batch
			var err error
			if i%2 == 0 {
				out, err = inbox.PublishBatch(ctx, b, q, rows, done, Job{Payload: []byte(cb)})
			} else {
				out, err = publishBatchInTx(ctx, b, q, rows, done, Job{Payload: []byte(cb)})
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(out.Rows) != size || out.Callback == 0 {
				t.Fatalf("batch %d: %+v", i, out)
			}
			members[cb] = out.Rows
		}
		cbs := newCallbacks(batches)
		// Workers past the pool of 8. Row lock on MariaDB keeps 4 + 1: there a
		// release still waits on a child a claim took (8 + 2 stalled 1 run in 4).
		rowWorkers, cbWorkers := 8, 2
		if form.Name() == "rowlock" && strings.HasPrefix(url, "mysql") {
			rowWorkers, cbWorkers = 4, 1
		}
		var mu sync.Mutex
		handled := map[string]int{}
		sub, err := inbox.Subscribe(b, q, func(ctx context.Context, j Job) error {
			p := string(j.Payload)
			mu.Lock()
			handled[p]++
			mu.Unlock()
			if strings.HasSuffix(p, "-fail") {
				return errors.New("this row fails")
			}
			return nil
		}, inbox.Form(form), inbox.Workers(rowWorkers), inbox.MaxAttempts(1))
		if err != nil {
			t.Fatal(err)
		}
		onDone, err := inbox.Subscribe(b, done, func(ctx context.Context, j Job) error {
			if n := unsettled(t, b, table, members[string(j.Payload)]); n != 0 {
				t.Errorf("callback %s ran with %d rows of its batch not settled", j.Payload, n)
			}
			cbs.record(ctx, string(j.Payload))
			return nil
		}, inbox.Form(form), inbox.Workers(cbWorkers))
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
		inboxtest.RunSubscription(t, onDone)
		for i := range batches {
			select {
			case <-cbs.ran:
			case <-time.After(30 * time.Second):
				dumpBatches(t, b, table, members, cbs)
				t.Fatalf("callbacks: %d of %d within 30s", i, batches)
			}
		}
		inboxtest.Idle(t, onDone)
		cbs.check(t, want)
		mu.Lock()
		defer mu.Unlock()
		for p, n := range handled {
			if n != 1 {
				t.Errorf("row %s handled %d times", p, n)
			}
		}
		if len(handled) != batches*size {
			t.Errorf("%d rows handled, want %d", len(handled), batches*size)
		}
	})
}

// publishBatchInTx is PublishBatchTx in a transaction of its own.
func publishBatchInTx(ctx context.Context, b *inbox.Broker, q inbox.Queue[Job], rows []Job, callback inbox.Queue[Job], row Job) (inbox.Batch, error) {
	tx, err := b.DB().BeginTx(ctx, nil)
	if err != nil {
		return inbox.Batch{}, err
	}
	defer tx.Rollback()
	out, err := inbox.PublishBatchTx(ctx, b, tx, q, rows, callback, row)
	if err != nil {
		return out, err
	}
	if err := tx.Commit(); err != nil {
		return out, err
	}
	b.Wake(q.Table(), "")
	return out, nil
}

func dumpBatches(t *testing.T, b *inbox.Broker, table string, members map[string][]int64, cbs *callbacks) {
	cbs.mu.Lock()
	defer cbs.mu.Unlock()
	for cb, ids := range members {
		if cbs.runs[cb] > 0 {
			continue
		}
		rows, err := b.DB().Query(fmt.Sprintf("SELECT x.child_id, x.parent_id, x.state, x.policy, p.id, p.last_error FROM %s_deps x LEFT JOIN %s p ON p.id = x.parent_id WHERE x.parent_id IN (%s)", table, table, strings.Trim(strings.Join(strings.Fields(fmt.Sprint(ids)), ","), "[]")))
		if err != nil {
			t.Log(err)
			return
		}
		for rows.Next() {
			var c, p, st, po int64
			var pid sql.NullInt64
			var le sql.NullString
			rows.Scan(&c, &p, &st, &po, &pid, &le)
			t.Logf("%s: child %d parent %d state %d policy %d parent row %v %v", cb, c, p, st, po, pid, le)
		}
		rows.Close()
	}
}

// A process killed while the last rows of a batch settle still yields one
// callback, counting every row. A second broker takes the whole batch;
// some rows block in its handlers. Then the last row is deleted by plain
// SQL, as an ack that committed just before its process died, before its
// release ran; the second broker's subscription is stopped first, without
// waiting for its blocked handlers (ShutdownTimeout 1ms). The first broker handles what
// is left ("retried": two rows given back; "swept": none, so only the
// sweep for stranded edges can release the callback).
// Every form, every database.
func TestBatchCallbackAfterKill(t *testing.T) {
	eachFormDB(t, func(t *testing.T, form claim.Form, url string) {
		for _, c := range []struct {
			name    string
			blocked int // of the batch's last rows, blocked in the killed process
		}{{"retried", 3}, {"swept", 1}} {
			t.Run(c.name, func(t *testing.T) { batchKilled(t, form, url, c.blocked) })
		}
	})
}

func batchKilled(t *testing.T, form claim.Form, url string, blocked int) {
	const size = 10
	b1 := open(t, url, inbox.PollInterval(100*time.Millisecond))
	b2 := open(t, url, inbox.PollInterval(100*time.Millisecond))
	table := depsTable(t, b1)
	q := inbox.MustQueue[Job](table).Group("rows")
	done := q.Group("done")
	ctx := context.Background()
	rows := make([]Job, size)
	for i := range rows {
		rows[i].Payload = []byte(fmt.Sprint(i))
	}
	batch, err := inbox.PublishBatch(ctx, b2, q, rows, done, Job{Payload: []byte("callback")})
	if err != nil {
		t.Fatal(err)
	}
	inWork := make(chan struct{}, size)
	ev := inboxtest.NewEvents(t)
	sub2, err := inbox.Subscribe(b2, q, func(ctx context.Context, j Job) error {
		var i int
		fmt.Sscan(string(j.Payload), &i)
		if i < size-blocked {
			return nil
		}
		inWork <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}, inbox.Form(form), inbox.Workers(size), inbox.ShutdownTimeout(time.Millisecond),
		inbox.Backoff(func(int) time.Duration { return 0 }), ev.Observe())
	if err != nil {
		t.Fatal(err)
	}
	kill := inboxtest.RunSubscription(t, sub2)
	receiveN(t, inWork, blocked, "rows blocked in the process to kill")
	ev.Wait("the other rows acked", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Acked) == size-blocked })
	if blocked == 1 {
		// Every release of the acks has run: only the last row holds
		// the callback.
		eventually(t, "the acked rows' edges marked", func() bool {
			var n int
			if err := b1.DB().QueryRow(fmt.Sprintf("SELECT count(*) FROM %s_deps WHERE state = 1", table)).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n == size-1
		})
	}
	kill()
	// The row lock form holds its rows in a transaction until the
	// handler returns: delete the last row once it is given back.
	last := batch.Rows[size-1]
	if _, err := b1.DB().Exec(fmt.Sprintf("DELETE FROM %s WHERE id = %d", table, last)); err != nil {
		t.Fatal(err)
	}

	cbs := newCallbacks(1)
	var handled sync.Map
	sub1, err := inbox.Subscribe(b1, q, func(ctx context.Context, j Job) error {
		handled.Store(j.ID, true)
		return nil
	}, inbox.Form(form))
	if err != nil {
		t.Fatal(err)
	}
	onDone, err := inbox.Subscribe(b1, done, func(ctx context.Context, j Job) error {
		if n := unsettled(t, b1, table, batch.Rows); n != 0 {
			t.Errorf("the callback ran with %d rows of its batch not settled", n)
		}
		cbs.record(ctx, string(j.Payload))
		return nil
	}, inbox.Form(form))
	if err != nil {
		t.Fatal(err)
	}
	inboxtest.RunSubscription(t, sub1)
	inboxtest.RunSubscription(t, onDone)
	receiveN(t, cbs.ran, 1, "the callback")
	inboxtest.Idle(t, onDone)
	cbs.check(t, map[string]inbox.Parents{"callback": {Acked: size}})
	n := 0
	handled.Range(func(any, any) bool { n++; return true })
	if n != blocked-1 {
		t.Errorf("the first broker handled %d rows, want the %d given back", n, blocked-1)
	}
}

// A batch of no rows, a callback of another table and a table without its
// edges are refused by name, writing nothing. A row whose key is queued
// joins the batch as the queued row; a callback whose key is queued
// writes nothing and returns the queued callback's id.
func TestBatchRefusedAndDuplicates(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		b := openKeyed(t, url, true)
		ctx := context.Background()
		if err := migrations.ApplyDependencies(ctx, b.DB(), "jobs", "id"); err != nil {
			t.Fatal(err)
		}
		q := inbox.MustQueue[Invoice]("jobs")
		inv := func(key string) Invoice { return Invoice{Payload: []byte(key), Key: key} }
		if _, err := inbox.PublishBatch(ctx, b, q, nil, q, inv("cb")); !errors.Is(err, inbox.ErrInvalid) || !strings.Contains(err.Error(), "no rows") {
			t.Fatalf("a batch of no rows: %v", err)
		}
		other := inbox.MustQueue[Job](ownTable(t, b))
		if _, err := inbox.PublishBatch(ctx, b, q, []Invoice{inv("a")}, other, Job{}); !errors.Is(err, inbox.ErrInvalid) || !strings.Contains(err.Error(), "the callback lives in the batch's table") {
			t.Fatalf("a callback of another table: %v", err)
		}
		if _, err := inbox.PublishBatch(ctx, b, other, []Job{{}, {}}, other, Job{}); err == nil || !strings.Contains(err.Error(), "migrations.ApplyDependencies") {
			t.Fatalf("a batch in a table without edges: %v", err)
		}
		if n := rowsOf(t, b.DB(), other.Table()); n != 0 {
			t.Fatalf("a refused batch left %d rows", n)
		}

		queued, err := inbox.Publish(ctx, b, q, inv("a"))
		if err != nil {
			t.Fatal(err)
		}
		first, err := inbox.PublishBatch(ctx, b, q, []Invoice{inv("a"), inv("b")}, q, inv("cb"))
		var dup *inbox.DuplicateError
		if !errors.As(err, &dup) || len(first.Rows) != 2 || first.Rows[0] != queued || first.Callback == 0 {
			t.Fatalf("a batch with a queued key: %+v, %v; want the queued row %d in it", first, err, queued)
		}
		if n := edgesOf(t, b.DB(), "jobs"); n != 2 {
			t.Fatalf("the callback has %d edges, want 2", n)
		}
		again, err := inbox.PublishBatch(ctx, b, q, []Invoice{inv("c")}, q, inv("cb"))
		if !errors.As(err, &dup) || again.Callback != first.Callback || again.Rows != nil {
			t.Fatalf("a batch whose callback's key is queued: %+v, %v; want nothing but the queued callback %d", again, err, first.Callback)
		}
		if n := rowsOf(t, b.DB(), "jobs"); n != 3 {
			t.Fatalf("%d rows, want 3: the batch whose callback was queued must write nothing", n)
		}
	})
}
