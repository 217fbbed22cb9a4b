package inbox_test

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/claim/lease"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/internal/benchkit"
	"github.com/sqlinbox/sqlinbox/internal/claim"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// benchForms are the claim forms measured, each on the databases it serves.
var benchForms = []struct {
	name    string
	form    claim.Form
	history bool // acks move rows into the history (inbox.History)
}{
	{"lease", lease.Form, false},
	{"lease+history", lease.Form, true},
}

// BenchmarkClaimHandleAck drains b.N rows (one op is one job: claimed,
// handled by a no-op handler, acknowledged) with one subscription of 50
// workers, so ns/op is the time per job and allocs/op the allocations per
// job, the broker's start amortized. The rows are written by plain SQL
// before the timer starts.
//
// cpu-us/job is this process's CPU (user and system) a job: on SQLite, in
// the process, it ranks two builds where other work on the machine makes
// jobs/s swing.
//
// lease+history is the lease form with inbox.History: each ack moves its
// row into bench_jobs_history.
//
//	go test -run XXX -bench ClaimHandleAck -benchmem ./inbox
func BenchmarkClaimHandleAck(b *testing.B) {
	dbs := []struct {
		name string
		kind dialect.Kind
		url  func(b *testing.B) string
	}{
		{"sqlite", dialect.SQLite, func(b *testing.B) string { return "sqlite://" + filepath.Join(b.TempDir(), "bench.db") }},
		{"postgres", dialect.Postgres, func(b *testing.B) string { return inboxtest.Postgres(b) }},
	}
	for _, f := range benchForms {
		for _, db := range dbs {
			if f.form.Supports(dialect.Of(db.kind)) != nil {
				continue
			}
			b.Run(f.name+"/"+db.name, func(b *testing.B) {
				url := db.url(b)
				pool := inboxtest.Open(b, url)
				ctx := context.Background()
				first, err := benchkit.Fill(ctx, pool, "bench_jobs", b.N)
				if err != nil {
					b.Fatal(err)
				}
				cfg := benchkit.Config{URL: url, Table: "bench_jobs", Form: f.form, Instances: 1, Workers: 50, Jobs: b.N}
				if f.history {
					cfg.History = time.Hour
					if _, err := pool.ExecContext(ctx, "DROP TABLE IF EXISTS bench_jobs_history"); err != nil {
						b.Fatal(err)
					}
					if err := migrations.ApplyHistory(ctx, pool, "bench_jobs", "id", ""); err != nil {
						b.Fatal(err)
					}
				}
				tr := benchkit.NewTracker(first, b.N)
				b.ReportAllocs()
				b.ResetTimer()
				cpu := processCPU()
				res, err := benchkit.Drain(ctx, cfg, tr)
				cpu = processCPU() - cpu
				b.StopTimer()
				if err != nil {
					b.Fatal(err)
				}
				if d, l := tr.Duplicates(), tr.Lost(); d != 0 || l != 0 {
					b.Fatalf("duplicates=%d lost=%d", d, l)
				}
				b.ReportMetric(res.JobsPerSec, "jobs/s")
				b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(b.N), "cpu-us/job")
				b.ReportMetric(float64(b.N)/float64(max(res.Claims, 1)), "jobs/claim")
			})
		}
	}
}

// processCPU is the CPU time (user and system) the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
