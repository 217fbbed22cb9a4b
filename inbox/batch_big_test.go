package inbox_test

import (
	"context"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/internal/claim"
)

// A batch of 10,000 rows drains at a pace near a drain of 10,000 rows
// without one: the release after each ack reads the callback's edges, and
// must not read all of them each time (10,000 acks x 10,000 edges). The
// figure is logged; the bound is generous.
func TestBatchOfTenThousand(t *testing.T) {
	n := 10000
	if testing.Short() {
		n = 1000
	}
	if s := os.Getenv("BATCH_ROWS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	workers := 16
	if s := os.Getenv("BATCH_WORKERS"); s != "" {
		workers, _ = strconv.Atoi(s)
	}
	eachFormDB(t, func(t *testing.T, form claim.Form, url string) {
		drain := func(batch bool) time.Duration {
			b := open(t, url)
			table := depsTable(t, b)
			q := inbox.MustQueue[Job](table)
			rows := make([]Job, n)
			ctx := context.Background()
			var callback atomic.Int64
			var parents inbox.Parents
			done := make(chan struct{})
			var acked atomic.Int64
			sub, err := inbox.Subscribe(b, q, func(ctx context.Context, j Job) error {
				if string(j.Payload) == "callback" {
					callback.Add(1)
					if left := rowsOf(t, b.DB(), table); left != 1 {
						t.Errorf("the callback ran with %d rows of its batch in the table", left-1)
					}
					parents, _ = inbox.ParentsFrom(ctx)
					close(done)
					return nil
				}
				if acked.Add(1) == int64(n) && !batch {
					close(done)
				}
				return nil
			}, inbox.Workers(workers), inbox.Form(form))
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if batch {
				if _, err := inbox.PublishBatch(ctx, b, q, rows, q, Job{Payload: []byte("callback")}); err != nil {
					t.Fatal(err)
				}
			} else if _, err := inbox.PublishMany(ctx, b, q, rows); err != nil {
				t.Fatal(err)
			}
			published := time.Since(start)
			inboxtest.RunSubscription(t, sub)
			select {
			case <-done:
			case <-time.After(10 * time.Minute):
				t.Fatalf("batch %v: %d of %d acked within 10 minutes", batch, acked.Load(), n)
			}
			took := time.Since(start)
			t.Logf("batch %v: %d rows published in %v, drained in %v", batch, n, published, took)
			if batch && (callback.Load() != 1 || parents != (inbox.Parents{Acked: n})) {
				t.Fatalf("callback ran %d times with %+v, want once with %d acked", callback.Load(), parents, n)
			}
			return took
		}
		plain := drain(false)
		batch := drain(true)
		t.Logf("%d rows: batch %v, plain %v: %.2fx", n, batch, plain, float64(batch)/float64(plain))
	})
}
