package lock_test

import (
	"context"
	"os"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/lock"
)

// benchStores makes two stores per backend over separate connections to one
// shared place: the second stands for another instance.
func benchStores(b *testing.B) map[string]func(b *testing.B) (lock.Store, lock.Store) {
	return map[string]func(b *testing.B) (lock.Store, lock.Store){
		"memory": func(b *testing.B) (lock.Store, lock.Store) {
			m := lock.NewMemory(nil)
			return m, m
		},
		"sqlite": func(b *testing.B) (lock.Store, lock.Store) {
			u := "sqlite://:memory:bench_" + unique()
			return openSQL(b, u, true), openSQL(b, u, false)
		},
		"postgres": func(b *testing.B) (lock.Store, lock.Store) {
			u := postgresSchema(b)
			return openSQL(b, u, true), openSQL(b, u, false)
		},
		"redis": func(b *testing.B) (lock.Store, lock.Store) {
			if os.Getenv("REDIS_TEST_URL") == "" {
				b.Skip("REDIS_TEST_URL is not set: skipping the Redis benchmark")
			}
			prefix := "bench:" + unique() + ":"
			b.Cleanup(func() { redisCleanup(b, prefix) })
			return openRedis(b, prefix), openRedis(b, prefix)
		},
	}
}

var benchOrder = []string{"memory", "sqlite", "postgres", "redis"}

// BenchmarkTakeRelease: one uncontended take and its release per op.
func BenchmarkTakeRelease(b *testing.B) {
	for _, name := range benchOrder {
		b.Run(name, func(b *testing.B) {
			s, _ := benchStores(b)[name](b)
			l, err := lock.New(s, lock.Namespace("bench"))
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			start := time.Now()
			n := 0
			for b.Loop() {
				h, ok, err := l.Take(ctx, "free")
				if err != nil || !ok {
					b.Fatalf("take: ok=%v err=%v", ok, err)
				}
				if err := l.Release(ctx, h.Token); err != nil {
					b.Fatal(err)
				}
				n++
			}
			b.ReportMetric(float64(n)/time.Since(start).Seconds(), "take+release/s")
		})
	}
}

// BenchmarkReleaseToWaiter: a holder on one store releases while a waiter
// on another store (another pool or client: another instance) sleeps in
// Take with a retry delay of a minute; the metric is the time from the
// release's call to the waiter's hold, p50 and p90.
func BenchmarkReleaseToWaiter(b *testing.B) {
	for _, name := range benchOrder {
		b.Run(name, func(b *testing.B) {
			s1, s2 := benchStores(b)[name](b)
			holder, _ := lock.New(s1, lock.Namespace("bench"))
			waiter, _ := lock.New(s2, lock.Namespace("bench"))
			ctx := context.Background()
			var lat []time.Duration
			for b.Loop() {
				h, ok, err := holder.Take(ctx, "handover", lock.TTL(time.Minute))
				if err != nil || !ok {
					b.Fatalf("holder: ok=%v err=%v", ok, err)
				}
				got := make(chan time.Time, 1)
				var wh lock.Hold
				go func() {
					var ok bool
					wh, ok, err = waiter.Take(ctx, "handover", lock.TTL(time.Minute), lock.Wait(time.Minute), lock.RetryDelay(time.Minute))
					if !ok {
						b.Errorf("waiter: ok=%v err=%v", ok, err)
					}
					got <- time.Now()
				}()
				time.Sleep(5 * time.Millisecond) // let the waiter try once and go to sleep
				at := time.Now()
				if err := holder.Release(ctx, h.Token); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, (<-got).Sub(at))
				if err := waiter.Release(ctx, wh.Token); err != nil {
					b.Fatal(err)
				}
			}
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*9/10].Microseconds()), "p90-µs")
		})
	}
}

// BenchmarkConcurrentTake: six takers, each on a store of its own, take a
// new name with six places at once (a barrier starts them) and release; the
// metrics are the p50 and p90 of one Take and the share of takes that got a
// place (all of them should: every taker holds its place until all tried).
func BenchmarkConcurrentTake(b *testing.B) {
	const n = 6
	for _, name := range benchOrder {
		b.Run(name, func(b *testing.B) {
			newStore := map[string]backend{"memory": memoryBackend, "sqlite": sqliteBackend, "postgres": postgresBackend, "redis": redisBackend}[name].open(b)
			lockers := make([]*lock.Locker, n)
			for i := range lockers {
				lockers[i], _ = lock.New(newStore(b), lock.Namespace("bench"))
			}
			ctx := context.Background()
			var lat []time.Duration
			got, tried := 0, 0
			var mu sync.Mutex
			for round := 0; b.Loop(); round++ {
				name := "six-" + strconv.Itoa(round) // a name never taken, as with a lock per order
				var ready, took, wg sync.WaitGroup
				start, done := make(chan struct{}), make(chan struct{})
				ready.Add(n)
				took.Add(n)
				wg.Add(n)
				for _, l := range lockers {
					go func() {
						defer wg.Done()
						ready.Done()
						<-start
						t0 := time.Now()
						h, ok, err := l.Take(ctx, name, lock.MaxHolders(n))
						d := time.Since(t0)
						if err != nil {
							b.Error(err)
						}
						mu.Lock()
						lat, tried = append(lat, d), tried+1
						if ok {
							got++
						}
						mu.Unlock()
						took.Done()
						<-done // hold the place until every taker has tried
						if ok {
							if err := l.Release(ctx, h.Token); err != nil {
								b.Error(err)
							}
						}
					}()
				}
				ready.Wait()
				close(start)
				took.Wait()
				close(done)
				wg.Wait()
			}
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*9/10].Microseconds()), "p90-µs")
			b.ReportMetric(float64(got)/float64(tried), "got/tried")
		})
	}
}
