//go:build unix

package failovertest_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/lock"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// lockers are two lockers on the cluster, four goroutines each, taking one
// lock of one holder over and over, holding it 2 ms.
type lockers struct {
	holders atomic.Int32 // holding now, in this process
	most    atomic.Int32 // the most at once
	takes   atomic.Int64

	mu        sync.Mutex
	takenAt   []time.Time
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	namespace string
}

func startLockers(t *testing.T, raw string) *lockers {
	t.Helper()
	var r [4]byte
	_, _ = rand.Read(r[:])
	lk := &lockers{namespace: "failover_" + hex.EncodeToString(r[:])}
	ctx, cancel := context.WithCancel(context.Background())
	lk.cancel = cancel
	for i := range 2 {
		db := openBroker(t, raw, inbox.MaxConns(6)).DB()
		mctx, mcancel := context.WithTimeout(ctx, 30*time.Second)
		err := migrations.ApplyLocks(mctx, db)
		mcancel()
		if err != nil {
			t.Fatalf("lock tables: %v", err)
		}
		store, err := lock.NewSQL(ctx, db)
		if err != nil {
			t.Fatalf("locker %d: %v", i, err)
		}
		t.Cleanup(func() { _ = store.Close() })
		l, err := lock.New(store, lock.Namespace(lk.namespace))
		if err != nil {
			t.Fatal(err)
		}
		for range 4 {
			lk.wg.Add(1)
			go lk.loop(ctx, l)
		}
	}
	t.Cleanup(lk.stop)
	return lk
}

func (lk *lockers) loop(ctx context.Context, l *lock.Locker) {
	defer lk.wg.Done()
	for ctx.Err() == nil {
		h, ok, err := l.Take(ctx, "one", lock.MaxHolders(1), lock.TTL(5*time.Second), lock.Wait(10*time.Second))
		if err != nil || !ok {
			continue
		}
		n := lk.holders.Add(1)
		for m := lk.most.Load(); n > m && !lk.most.CompareAndSwap(m, n); m = lk.most.Load() {
		}
		lk.takes.Add(1)
		lk.mu.Lock()
		lk.takenAt = append(lk.takenAt, time.Now())
		lk.mu.Unlock()
		timer := time.NewTimer(2 * time.Millisecond)
		select {
		case <-timer.C:
		case <-ctx.Done():
		}
		timer.Stop()
		lk.holders.Add(-1)
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = l.Release(rctx, h.Token) // one that fails frees its place at the TTL
		cancel()
	}
}

func (lk *lockers) stop() {
	lk.cancel()
	lk.wg.Wait()
}

func (lk *lockers) waitTakes(t *testing.T, n int64) {
	t.Helper()
	waitFor(t, resumeBound, "lock takes at the start", func() bool { return lk.takes.Load() >= n })
}

// resumedAfter waits for the first take after writable and returns how long
// after writable it came.
func (lk *lockers) resumedAfter(t *testing.T, writable time.Time) time.Duration {
	t.Helper()
	var resumed time.Duration
	waitFor(t, resumeBound, "lock: a take after the new primary took writes", func() bool {
		lk.mu.Lock()
		defer lk.mu.Unlock()
		for i := len(lk.takenAt) - 1; i >= 0 && lk.takenAt[i].After(writable); i-- {
			resumed = lk.takenAt[i].Sub(writable)
		}
		return len(lk.takenAt) > 0 && lk.takenAt[len(lk.takenAt)-1].After(writable)
	})
	return resumed
}
