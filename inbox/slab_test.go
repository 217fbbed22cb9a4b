package inbox_test

import (
	"bytes"
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
)

// A job still in work does not keep the rows of its claim's other jobs
// alive once they are handled: a claim's Jobs share one slab, and each
// drops its row when its handler returns. Memory follows the jobs in work.
func TestJobInWorkKeepsNoClaimMatesRow(t *testing.T) {
	b := open(t, inboxtest.SQLite(t), inbox.PollInterval(time.Hour))
	const n = 8
	big := bytes.Repeat([]byte("x"), 1<<20) // a megabyte a row
	for range n {
		if _, err := b.DB().Exec("INSERT INTO jobs (payload) VALUES (?)", big); err != nil {
			t.Fatal(err)
		}
	}
	var freed atomic.Int64
	hold, release := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	ev := inboxtest.NewEvents(t)
	sub, err := inbox.Subscribe(b, inbox.MustQueue[Job]("jobs"), func(ctx context.Context, j Job) error {
		runtime.SetFinalizer(&j.Payload[0], func(*byte) { freed.Add(1) })
		if first.CompareAndSwap(false, true) {
			close(hold)
			<-release // this job stays in work
		}
		return nil
	}, inbox.Workers(n), ev.Observe())
	if err != nil {
		t.Fatal(err)
	}
	inboxtest.RunSubscription(t, sub)
	defer close(release)
	<-hold
	ev.Wait("the other rows acked", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Acked) == n-1 })
	deadline := time.Now().Add(30 * time.Second)
	for freed.Load() < n-1 && time.Now().Before(deadline) {
		runtime.GC() // finalizers run after the collection that finds the rows unreachable
		runtime.Gosched()
	}
	if got := freed.Load(); got < n-1 {
		t.Fatalf("%d of the %d handled rows freed while one job of their claim is in work, want all", got, n-1)
	}
}
