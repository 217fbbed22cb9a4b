package inbox_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// The prune under a steady load, on Postgres: rows published at 5,000 a
// second and handled as they come, first without a history (the claims'
// baseline), then with History(30s): the history's rows, sampled every
// five seconds, stay at the retention's (150,000 rows) and at most one
// prune interval more, and claims are timed in both phases (and minute by
// minute, to show a drift). Opt-in, it runs for minutes;
// SQLINBOX_HISTORY_STEADY_DB=sqlite runs it on a SQLite file instead:
//
//	SQLINBOX_HISTORY_STEADY=2m go test -run TestHistorySteadyPrune -v ./inbox
func TestHistorySteadyPrune(t *testing.T) {
	phase, err := time.ParseDuration(os.Getenv("SQLINBOX_HISTORY_STEADY"))
	if err != nil {
		t.Skip("set SQLINBOX_HISTORY_STEADY to the history phase's length (2m) to run it")
	}
	file := filepath.Join(t.TempDir(), "steady.db")
	url := "sqlite://" + file
	if os.Getenv("SQLINBOX_HISTORY_STEADY_DB") != "sqlite" {
		url, file = inboxtest.Postgres(t), ""
	}
	ctx := context.Background()
	b := open(t, url)
	const retention, rate = 30 * time.Second, 5000
	if err := migrations.ApplyHistory(ctx, b.DB(), "jobs", "id", ""); err != nil {
		t.Fatal(err)
	}
	base := steadyPhase(t, b, file, phase/2, 0)
	hist := steadyPhase(t, b, file, phase, retention)
	t.Logf("claims without a history: %s", base.claims)
	t.Logf("claims with History(%v) and its prune: %s", retention, hist.claims)
	for i, m := range hist.minutes {
		t.Logf("claims in minute %d: %s", i+1, m)
	}
	t.Logf("history rows every 5 s: %v", hist.sizes)
	if file != "" {
		t.Logf("database file and its log, KiB every 5 s: %v", hist.files)
	}
	// The retention's rows, a prune interval's (a tenth of it) more, and
	// a fifth for slack.
	bound := int64(rate) * int64((retention+retention/10)/time.Second) * 12 / 10
	for i, n := range hist.sizes {
		if time.Duration(i)*5*time.Second > retention+10*time.Second && n > bound {
			t.Errorf("history held %d rows at %ds, above %d (retention %v at %d rows/s, an interval more, 20%% slack)", n, i*5, bound, retention, rate)
		}
	}
	if hist.claims.p99 > 2*base.claims.p99+10*time.Millisecond {
		t.Errorf("claims' p99 %v with the history, %v without: more than twice", hist.claims.p99, base.claims.p99)
	}
	if hist.acked < int64(float64(rate)*phase.Seconds()*0.9) {
		t.Errorf("%d rows handled in %v with the history: the load was not kept up", hist.acked, phase)
	}
}

type steadyResult struct {
	claims  durations
	minutes []durations // the phase's claims minute by minute
	sizes   []int64
	files   []string // SQLite: the database's and its log's sizes
	acked   int64
}

type durations struct{ p50, p99, max time.Duration }

func (d durations) String() string {
	return "p50 " + d.p50.String() + ", p99 " + d.p99.String() + ", max " + d.max.String()
}

// steadyPhase publishes 500 rows every 100 ms for d, handled by a service
// of 32 workers (with History(retention) when positive), and times its
// claims. file is the SQLite database's, "" on Postgres.
func steadyPhase(t *testing.T, b *inbox.Broker, file string, d, retention time.Duration) steadyResult {
	ctx := context.Background()
	var mu sync.Mutex
	var claims []time.Duration
	var byMinute [][]time.Duration
	start := time.Now()
	svc := inbox.NewService("steady", "0", b)
	svc.Signals = false
	svc.AddHooks(inbox.Hooks{Claimed: func(_ *inbox.Subscription, c inbox.ClaimEvent) {
		mu.Lock()
		took := c.End.Sub(c.Start)
		claims = append(claims, took)
		m := int(time.Since(start) / time.Minute)
		for len(byMinute) <= m {
			byMinute = append(byMinute, nil)
		}
		byMinute[m] = append(byMinute[m], took)
		mu.Unlock()
	}})
	opts := []inbox.SubOption{inbox.Workers(32)}
	if retention > 0 {
		opts = append(opts, inbox.History(retention))
	}
	q := inbox.MustQueue[Job]("jobs")
	sub, err := inbox.Handle(svc, q, func(context.Context, Job) error { return nil }, opts...)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(runCtx) }()
	<-svc.Started()
	var res steadyResult
	batch := make([]Job, 500)
	for i := range batch {
		batch[i].Payload = []byte("{}")
	}
	tick, sample := time.NewTicker(100*time.Millisecond), time.NewTicker(5*time.Second)
	defer tick.Stop()
	defer sample.Stop()
	end := time.After(d)
loop:
	for {
		select {
		case <-tick.C:
			if _, err := inbox.PublishMany(ctx, b, q, batch); err != nil {
				t.Fatal(err)
			}
		case <-sample.C:
			if retention > 0 {
				var n int64
				if err := b.DB().QueryRow("SELECT count(*) FROM jobs_history").Scan(&n); err != nil {
					t.Fatal(err)
				}
				res.sizes = append(res.sizes, n)
			}
			if file != "" {
				res.files = append(res.files, fmt.Sprintf("%d/%d", kib(file), kib(file+"-wal")))
			}
		case <-end:
			break loop
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	res.acked = sub.Stats().Acked
	mu.Lock()
	defer mu.Unlock()
	res.claims = percentiles(claims)
	for _, m := range byMinute {
		res.minutes = append(res.minutes, percentiles(m))
	}
	return res
}

// kib is the size of file in KiB, -1 if it is missing.
func kib(file string) int64 {
	fi, err := os.Stat(file)
	if err != nil {
		return -1
	}
	return fi.Size() >> 10
}

// percentiles sorts ds and reads its p50, p99 and max.
func percentiles(ds []time.Duration) durations {
	if len(ds) == 0 {
		return durations{}
	}
	slices.Sort(ds)
	return durations{ds[len(ds)/2], ds[len(ds)*99/100], ds[len(ds)-1]}
}
