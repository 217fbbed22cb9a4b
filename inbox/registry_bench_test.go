package inbox

import (
	"testing"
	"time"
)

// The registry's cost on every handling: one event counted in its minute.
func BenchmarkRegistryRecord(b *testing.B) {
	sub := &Subscription{table: "invoice_jobs", group: "eu"}
	r := &registry{minutes: map[minuteKey]*minuteCount{}}
	now := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r.record(sub, Event{Start: now, End: now.Add(time.Millisecond), Outcome: Acked})
		}
	})
}
