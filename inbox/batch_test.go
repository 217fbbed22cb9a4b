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
		}, inbox.Form(form), inbox.Workers(8), inbox.MaxAttempts(1))
		if err != nil {
			t.Fatal(err)
		}
		onDone, err := inbox.Subscribe(b, done, func(ctx context.Context, j Job) error {
			if n := unsettled(t, b, table, members[string(j.Payload)]); n != 0 {
				t.Errorf("callback %s ran with %d rows of its batch not settled", j.Payload, n)
			}
			cbs.record(ctx, string(j.Payload))
			return nil
		}, inbox.Form(form), inbox.Workers(2))
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
