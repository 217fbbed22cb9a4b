package lock_test

import (
	"context"
	"os"
	"sort"
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
			l, err := lock.New(s, lock.Config{Namespace: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			start := time.Now()
			n := 0
			for b.Loop() {
				h, ok, err := l.Take(ctx, "free", lock.Options{})
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
			holder, _ := lock.New(s1, lock.Config{Namespace: "bench"})
			waiter, _ := lock.New(s2, lock.Config{Namespace: "bench"})
			ctx := context.Background()
			var lat []time.Duration
			for b.Loop() {
				h, ok, err := holder.Take(ctx, "handover", lock.Options{TTL: time.Minute})
				if err != nil || !ok {
					b.Fatalf("holder: ok=%v err=%v", ok, err)
				}
				got := make(chan time.Time, 1)
				var wh lock.Hold
				go func() {
					var ok bool
					wh, ok, err = waiter.Take(ctx, "handover", lock.Options{TTL: time.Minute, Wait: time.Minute, RetryDelay: time.Minute})
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
