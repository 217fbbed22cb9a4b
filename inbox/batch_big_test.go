package inbox_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
)

// A batch of 10,000 rows drains at a pace near a drain of 10,000 rows
// without one: the release after each ack reads the callback's edges, and
// must not read all of them each time (10,000 acks x 10,000 edges). The
// ratio is logged; the bound is generous (a quadratic release takes
// hundreds of times longer).
func TestBatchOfTenThousand(t *testing.T) {
	n := 10000
	if testing.Short() {
		n = 1000
	}
	eachDB(t, func(t *testing.T, url string) {
		plain := drainBatch(t, url, n, false)
		batch := drainBatch(t, url, n, true)
		t.Logf("%s: %d rows: batch %v, plain %v: %.2fx", t.Name(), n, batch, plain, float64(batch)/float64(plain))
		if batch > 10*plain+10*time.Second {
			t.Errorf("a batch of %d rows drained in %v, %.1fx a drain without one (%v)", n, batch, float64(batch)/float64(plain), plain)
		}
	})
}

// drainBatch publishes n rows, in a batch or not, and drains them with 16
// workers: it returns the time from the publish to the callback's handling
// (to the last row's without a batch).
func drainBatch(t *testing.T, url string, n int, batch bool) time.Duration {
	b := open(t, url)
	table := depsTable(t, b)
	q := inbox.MustQueue[Job](table)
	ctx := context.Background()
	var callbacks, acked atomic.Int64
	var parents atomic.Value
	done := make(chan struct{})
	sub, err := inbox.Subscribe(b, q, func(ctx context.Context, j Job) error {
		if string(j.Payload) == "callback" {
			if left := rowsOf(t, b.DB(), table); left != 1 {
				t.Errorf("the callback ran with %d rows of its batch in the table", left-1)
			}
			p, _ := inbox.ParentsFrom(ctx)
			parents.Store(p)
			if callbacks.Add(1) == 1 {
				close(done)
			}
			return nil
		}
		if acked.Add(1) == int64(n) && !batch {
			close(done)
		}
		return nil
	}, inbox.Workers(16))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if batch {
		_, err = inbox.PublishBatch(ctx, b, q, make([]Job, n), q, Job{Payload: []byte("callback")})
	} else {
		_, err = inbox.PublishMany(ctx, b, q, make([]Job, n))
	}
	if err != nil {
		t.Fatal(err)
	}
	published := time.Since(start)
	inboxtest.RunSubscription(t, sub)
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		t.Fatalf("batch %v: %d of %d acked within 5 minutes", batch, acked.Load(), n)
	}
	took := time.Since(start)
	t.Logf("batch %v: %d rows published in %v, drained in %v", batch, n, published, took)
	if batch {
		inboxtest.Idle(t, sub)
		if p := parents.Load(); callbacks.Load() != 1 || p != (inbox.Parents{Acked: n}) {
			t.Fatalf("the callback ran %d times with %+v, want once with %d acked", callbacks.Load(), p, n)
		}
	}
	return took
}
