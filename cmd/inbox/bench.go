package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/internal/benchkit"
	"github.com/sqlinbox/sqlinbox/notify"
)

func init() {
	register("bench", "measure: throughput (drain a backlog), latency (write to handler start), idle (statements of an idle subscription), churn (pickup and idle reads after a drain, no vacuum), groups (idle cost of many group subscriptions), publish (PublishMany beside a bare COPY)", bench)
}

func bench(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		if cmd, ok := ctx.Value(commandKey{}).(*cobra.Command); ok && len(args) > 0 {
			cmd.Use = "bench throughput|latency|idle|churn|groups|registry|publish [flags]"
			cmd.Long = cmd.Short + ".\n`inbox bench KIND --help` lists the flags of each."
			_ = cmd.Help()
			return flag.ErrHelp
		}
		return fmt.Errorf("usage: inbox bench throughput|latency|idle|churn|groups|registry|publish --db URL ...")
	}
	switch args[0] {
	case "throughput":
		return benchThroughput(ctx, args[1:])
	case "latency":
		return benchLatency(ctx, args[1:])
	case "idle":
		return benchIdle(ctx, args[1:])
	case "churn":
		return benchChurn(ctx, args[1:])
	case "groups":
		return benchGroups(ctx, args[1:])
	case "registry":
		return benchRegistry(ctx, args[1:])
	case "publish":
		return benchPublish(ctx, args[1:])
	}
	return fmt.Errorf("unknown bench %q: use throughput, latency, idle, churn, groups, registry or publish", args[0])
}

// maxRSSMB is the process's peak resident set, from getrusage (KB on Linux),
// since it started or since the last resetPeakRSS.
func maxRSSMB() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return float64(ru.Maxrss) / 1024
}

// cpuSeconds is the CPU time (user and system) the process has used.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func dbKind(url string) string {
	switch {
	case strings.HasPrefix(url, "sqlite:"):
		return "sqlite"
	case strings.HasPrefix(url, "mysql:"):
		return "mysql"
	}
	return "postgres"
}

func benchThroughput(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench throughput", flag.ContinueOnError)
	db := fs.String("db", "", "database URL (required)")
	formName := fs.String("form", "lease", "claim form: "+formNames("|"))
	jobs := fs.Int("jobs", 100000, "rows to fill and drain")
	instances := fs.Int("instances", 1, "brokers, each with a pool of its own")
	workers := fs.Int("workers", 100, "workers per instance (with --procs: in all)")
	conns := fs.Int("conns", 0, "pool size per instance (0: the library's default)")
	notifyOn := fs.Bool("notify", false, "Postgres LISTEN/NOTIFY wake-ups")
	table := fs.String("table", "bench_jobs", "table to (re)create and drain")
	timeout := fs.Duration("timeout", 10*time.Minute, "give up after")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the drain to this file")
	memProfile := fs.String("memprofile", "", "write a heap profile to this file when half the rows are acknowledged")
	txFloor := fs.Int("tx-floor", 0, "after the drain, refill and drain again with this many bare per-job transaction loops (Postgres; the row-lock and advisory forms' floor), and print both")
	procs := fs.String("procs", "", "instance sweep: drain with each number of separate processes in turn (e.g. 2,4,8), --workers split evenly among them, or PxW shapes (8x100)")
	rounds := fs.Int("rounds", 1, "with --procs: times to run the whole sweep")
	waits := fs.Bool("waits", false, "with --procs on Postgres: sample pg_stat_activity's wait events every 10 ms during each drain")
	noBlocks := fs.Bool("no-blocks", false, "with --procs: drop the table's block sequence after the fill (a control: processes' claims then all start from the table's leading edge; see migrations.ApplyClaimBlocks)")
	limit := fs.Int("limit", 0, "drain under inbox.Limit(\"customer\", N): the fill keys each row id modulo --keys")
	keys := fs.Int("keys", 1000, "with --limit or --keyed: key values")
	keyed := fs.Bool("keyed", false, "fill the key column as --limit does, and drain without a limit (the control)")
	ownTables := fs.Bool("own-tables", false, "with --procs: each process drains a table of its own (TABLE_0, TABLE_1, ...) holding its share of the rows, a control: the rate no way of sharing one table can beat")
	if err := parseFlags(ctx, fs, args); err != nil {
		return err
	}
	if *db == "" {
		return fmt.Errorf("--db is required")
	}
	if *procs != "" {
		ps, per, err := parseProcs(*procs)
		if err != nil {
			return err
		}
		if _, err := formByName(*formName); err != nil {
			return err
		}
		return benchProcs(ctx, procsRun{db: *db, form: *formName, table: *table, procs: ps, per: per, workers: *workers, conns: *conns,
			jobs: *jobs, rounds: max(1, *rounds), notify: *notifyOn, waits: *waits, ownTables: *ownTables, noBlocks: *noBlocks, timeout: *timeout})
	}
	form, err := formByName(*formName)
	if err != nil {
		return err
	}
	setup, err := inbox.Open(*db)
	if err != nil {
		return err
	}
	defer setup.Close()
	fmt.Fprintf(os.Stderr, "filling %s with %d rows\n", *table, *jobs)
	first, err := benchkit.Fill(ctx, setup.DB(), *table, *jobs)
	if err != nil {
		return err
	}
	if *limit > 0 || *keyed {
		if err := benchkit.KeyRows(ctx, setup.DB(), *table, *keys); err != nil {
			return err
		}
	}
	tr := benchkit.NewTracker(first, *jobs)
	// The fill runs in this process too: its peak is read here and the
	// kernel's peak reset, so the drain's peak is the drain's alone.
	fillPeak, _ := peakRSSMB()
	reset := resetPeakRSS()
	watch := watchMem(50 * time.Millisecond)
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	fmt.Fprintf(os.Stderr, "draining with %d instance(s) x %d workers, %s form\n", *instances, *workers, *formName)
	var halfway func()
	if *memProfile != "" {
		halfway = func() {
			if err := writeHeapProfile(*memProfile); err != nil {
				fmt.Fprintf(os.Stderr, "memprofile: %v\n", err)
			}
		}
	}
	cpu0 := cpuSeconds()
	res, derr := benchkit.Drain(ctx, benchkit.Config{URL: *db, Table: *table, Form: form, Instances: *instances,
		Workers: *workers, Conns: *conns, Notify: *notifyOn, Jobs: *jobs, Progress: os.Stderr, Timeout: *timeout,
		Halfway: halfway, Limit: *limit}, tr)
	// cpu_us_per_job is this process's CPU; machine_cpu_us_per_job every
	// core's, the Postgres server's share and any other load included.
	drainCPU := cpuSeconds() - cpu0
	// drain_peak_rss_mb is the kernel's peak since the reset;
	// drain_steady_rss_mb the median of the 50 ms samples of the drain's
	// later half; the drain_* figures after them are the sample of the
	// largest resident set, split by kind. After the reset getrusage no longer holds the fill's
	// peak: the process's is the larger of the two phases'. Where the peak
	// cannot be reset, only the process's peak is known (-1 for the rest).
	drainPeak, _ := peakRSSMB()
	at, _ := watch.stop()
	steady := watch.steadyMB()
	procPeak := maxRSSMB()
	if reset {
		procPeak = max(fillPeak, drainPeak)
	} else {
		fillPeak, drainPeak = -1, -1
	}
	remaining, err := benchkit.Remaining(context.WithoutCancel(ctx), setup.DB(), *table)
	if err != nil {
		return err
	}
	fmt.Printf("form=%s db=%s jobs=%d instances=%d workers=%d notify=%t limit=%d keys=%d seconds=%.3f jobs_per_sec=%.0f duplicates=%d lost=%d remaining=%d stray=%d claims=%d max_rss_mb=%.1f fill_peak_rss_mb=%.1f drain_peak_rss_mb=%.1f drain_steady_rss_mb=%.1f drain_anon_mb=%.1f drain_file_mb=%.1f drain_go_mb=%.1f drain_heap_mb=%.1f drain_stacks_mb=%.1f drain_goroutines=%d cpu_us_per_job=%.1f machine_cpu_us_per_job=%.1f\n",
		*formName, dbKind(*db), *jobs, *instances, *workers, *notifyOn, *limit, *keys, res.Seconds, res.JobsPerSec,
		tr.Duplicates(), tr.Lost(), remaining, tr.Stray(), res.Claims, procPeak,
		fillPeak, drainPeak, steady, at.AnonMB, at.FileMB, at.GoMB, at.HeapMB, at.StacksMB, at.Goroutine,
		drainCPU*1e6/float64(max(*jobs, 1)), res.CPUPerJob(*jobs))
	if derr != nil || *txFloor == 0 {
		return derr
	}
	first, err = benchkit.Fill(ctx, setup.DB(), *table, *jobs)
	if err != nil {
		return err
	}
	ftr := benchkit.NewTracker(first, *jobs)
	setup.DB().SetMaxOpenConns(max(*txFloor, 8))
	fmt.Fprintf(os.Stderr, "draining again with %d bare per-job transaction loops\n", *txFloor)
	floor, err := benchkit.TxFloor(ctx, setup.DB(), *table, *txFloor, ftr)
	if err != nil {
		return err
	}
	fmt.Printf("floor=tx loops=%d jobs=%d seconds=%.3f jobs_per_sec=%.0f duplicates=%d lost=%d machine_cpu_us_per_job=%.1f form_vs_floor=%.2f\n",
		*txFloor, *jobs, floor.Seconds, floor.JobsPerSec, ftr.Duplicates(), ftr.Lost(), floor.CPUPerJob(*jobs), res.JobsPerSec/floor.JobsPerSec)
	return nil
}

// pcts returns p50 and p99 in milliseconds.
func pcts(d []time.Duration) (p50, p99 float64) {
	if len(d) == 0 {
		return -1, -1
	}
	slices.Sort(d)
	at := func(p float64) float64 {
		i := int(p*float64(len(d))+0.5) - 1
		return float64(d[max(0, min(i, len(d)-1))]) / float64(time.Millisecond)
	}
	return at(0.50), at(0.99)
}

// starts hands each handler's start time to the waiting sample by row id.
type starts struct {
	mu sync.Mutex
	at map[int64]chan time.Time
}

func (s *starts) expect(id int64) chan time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, ok := s.at[id]
	if !ok {
		ch = make(chan time.Time, 1)
		s.at[id] = ch
	}
	return ch
}

func (s *starts) handler(_ context.Context, r benchkit.Row) error {
	now := time.Now()
	s.expect(r.ID) <- now
	return nil
}

func (s *starts) wait(ctx context.Context, id int64) (time.Time, error) {
	ch := s.expect(id)
	t := time.NewTimer(30 * time.Second)
	defer t.Stop()
	select {
	case at := <-ch:
		s.mu.Lock()
		delete(s.at, id)
		s.mu.Unlock()
		return at, nil
	case <-t.C:
		return time.Time{}, fmt.Errorf("row %d was not handled within 30s", id)
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	}
}

// runSub subscribes the starts' handler on b and runs it until the returned
// stop is called.
func runSub(ctx context.Context, b *inbox.Broker, q inbox.Queue[benchkit.Row], s *starts) (stop func(), err error) {
	sub, err := inbox.Subscribe(b, q, s.handler, inbox.Workers(4))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = sub.Run(ctx) }()
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if err := sub.WaitIdle(wctx); err != nil {
		cancel()
		return nil, fmt.Errorf("subscription not idle: %w", err)
	}
	return func() { cancel(); <-done }, nil
}

func benchLatency(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench latency", flag.ContinueOnError)
	db := fs.String("db", "", "database URL (required)")
	notifyOn := fs.Bool("notify", false, "Postgres LISTEN/NOTIFY: also measure a publish from another instance")
	samples := fs.Int("samples", 200, "samples of publish (and notify)")
	insertSamples := fs.Int("insert-samples", 20, "samples of plain SQL insert (each waits up to a poll interval)")
	poll := fs.Duration("poll", inbox.DefaultPollInterval, "the subscription's poll interval")
	table := fs.String("table", "bench_latency", "table to (re)create")
	if err := parseFlags(ctx, fs, args); err != nil {
		return err
	}
	if *db == "" {
		return fmt.Errorf("--db is required")
	}
	if *notifyOn && dbKind(*db) != "postgres" {
		return fmt.Errorf("--notify needs Postgres")
	}
	q := inbox.MustQueue[benchkit.Row](*table)
	opts := []inbox.Option{inbox.PollInterval(*poll), inbox.WithHub(notify.NewHub())}
	if *notifyOn {
		opts = append(opts, inbox.ListenNotify())
	}
	b, err := inbox.Open(*db, opts...)
	if err != nil {
		return err
	}
	defer b.Close()
	if _, err := benchkit.Fill(ctx, b.DB(), *table, 0); err != nil {
		return err
	}
	s := &starts{at: map[int64]chan time.Time{}}
	stop, err := runSub(ctx, b, q, s)
	if err != nil {
		return err
	}
	defer stop()

	// A publish through this broker: the hub wakes the subscription.
	var pub []time.Duration
	for i := range *samples {
		t0 := time.Now()
		id, err := inbox.Publish(ctx, b, q, benchkit.Row{Payload: []byte("{}")})
		if err != nil {
			return err
		}
		at, err := s.wait(ctx, id)
		if err != nil {
			return err
		}
		pub = append(pub, at.Sub(t0))
		if i%50 == 49 {
			fmt.Fprintf(os.Stderr, "publish: %d/%d\n", i+1, *samples)
		}
	}

	// A plain insert by another pool: nothing wakes the subscription but
	// its poll (or, with the notify trigger installed, a notification). A
	// random pause before each keeps the samples from locking to the poll.
	other, err := inbox.Open(*db, inbox.WithHub(notify.NewHub()))
	if err != nil {
		return err
	}
	defer other.Close()
	ins := other.DB().QueryRowContext
	insertSQL := fmt.Sprintf("INSERT INTO %s (payload) VALUES ('{}') RETURNING id", *table)
	var plain []time.Duration
	for i := range *insertSamples {
		time.Sleep(rand.N(*poll))
		var id int64
		t0 := time.Now()
		if err := ins(ctx, insertSQL).Scan(&id); err != nil {
			return err
		}
		at, err := s.wait(ctx, id)
		if err != nil {
			return err
		}
		plain = append(plain, at.Sub(t0))
		fmt.Fprintf(os.Stderr, "insert: %d/%d\n", i+1, *insertSamples)
	}

	// A publish from another instance: its own pool and hub, so only
	// Postgres NOTIFY can carry the wake.
	var nt []time.Duration
	if *notifyOn {
		pubB, err := inbox.Open(*db, inbox.WithHub(notify.NewHub()), inbox.ListenNotify())
		if err != nil {
			return err
		}
		defer pubB.Close()
		for i := range *samples {
			t0 := time.Now()
			id, err := inbox.Publish(ctx, pubB, q, benchkit.Row{Payload: []byte("{}")})
			if err != nil {
				return err
			}
			at, err := s.wait(ctx, id)
			if err != nil {
				return err
			}
			nt = append(nt, at.Sub(t0))
			if i%50 == 49 {
				fmt.Fprintf(os.Stderr, "notify: %d/%d\n", i+1, *samples)
			}
		}
	}
	p50, p99 := pcts(pub)
	i50, i99 := pcts(plain)
	n50, n99 := pcts(nt)
	fmt.Printf("db=%s notify=%t poll_ms=%d publish_p50_ms=%.3f publish_p99_ms=%.3f insert_p50_ms=%.1f insert_p99_ms=%.1f notify_p50_ms=%.3f notify_p99_ms=%.3f samples=%d max_rss_mb=%.1f\n",
		dbKind(*db), *notifyOn, poll.Milliseconds(), p50, p99, i50, i99, n50, n99, *samples, maxRSSMB())
	return nil
}

func benchIdle(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench idle", flag.ContinueOnError)
	db := fs.String("db", "", "database URL (required; on Postgres a database no one else uses, since the count is the database's)")
	seconds := fs.Int("seconds", 30, "seconds to watch each case")
	poll := fs.Duration("poll", inbox.DefaultPollInterval, "the subscription's poll interval")
	table := fs.String("table", "bench_idle", "table to (re)create")
	if err := parseFlags(ctx, fs, args); err != nil {
		return err
	}
	if *db == "" {
		return fmt.Errorf("--db is required")
	}
	cases := []bool{false}
	if dbKind(*db) == "postgres" {
		cases = append(cases, true)
	}
	var out []string
	for _, withNotify := range cases {
		st, claims, err := idleCase(ctx, *db, *table, *poll, withNotify, time.Duration(*seconds)*time.Second)
		if err != nil {
			return err
		}
		tag := "plain"
		if withNotify {
			tag = "notify"
		}
		per := float64(*seconds) / poll.Seconds()
		fmt.Fprintf(os.Stderr, "%s: %.2f statements/s, %.2f claims/s (%.0f poll intervals)\n", tag, st/float64(*seconds), float64(claims)/float64(*seconds), per)
		out = append(out, fmt.Sprintf("%s_statements_per_sec=%.3f %s_claims_per_sec=%.3f %s_statements_per_poll=%.3f",
			tag, st/float64(*seconds), tag, float64(claims)/float64(*seconds), tag, st/per))
	}
	fmt.Printf("db=%s seconds=%d poll_ms=%d %s max_rss_mb=%.1f\n", dbKind(*db), *seconds, poll.Milliseconds(), strings.Join(out, " "), maxRSSMB())
	return nil
}

// idleCase runs one idle subscription for d and counts the statements it
// sent: on Postgres the database's committed and rolled back transactions
// (every statement of the library outside a transaction is one), less the
// probes; on SQLite the subscription's own count of claims, the only
// statements its loop sends.
func idleCase(ctx context.Context, url, table string, poll time.Duration, withNotify bool, d time.Duration) (statements float64, claims int64, err error) {
	opts := []inbox.Option{inbox.PollInterval(poll), inbox.WithHub(notify.NewHub())}
	if withNotify {
		opts = append(opts, inbox.ListenNotify())
	}
	b, err := inbox.Open(url, opts...)
	if err != nil {
		return 0, 0, err
	}
	defer b.Close()
	if _, err := benchkit.Fill(ctx, b.DB(), table, 0); err != nil {
		return 0, 0, err
	}
	q := inbox.MustQueue[benchkit.Row](table)
	sub, err := inbox.Subscribe(b, q, func(context.Context, benchkit.Row) error { return nil })
	if err != nil {
		return 0, 0, err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = sub.Run(rctx) }()
	defer func() { cancel(); <-done }()
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if err := sub.WaitIdle(wctx); err != nil {
		return 0, 0, err
	}
	var probe *sql.DB
	if dbKind(url) == "postgres" {
		mon, err := inbox.Open(url, inbox.WithHub(notify.NewHub()))
		if err != nil {
			return 0, 0, err
		}
		defer mon.Close()
		probe = mon.DB()
	}
	xacts := func() (float64, error) {
		if probe == nil {
			return 0, nil
		}
		var n int64
		err := probe.QueryRowContext(ctx, "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()").Scan(&n)
		return float64(n), err
	}
	// Let the backends flush what they counted before the window opens.
	time.Sleep(2 * time.Second)
	c0 := sub.Stats().Claims
	x0, err := xacts()
	if err != nil {
		return 0, 0, err
	}
	select {
	case <-time.After(d):
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	}
	c1 := sub.Stats().Claims
	// Backends report their counts at most once a second while busy and
	// within ten seconds once idle: wait for the window's to land.
	time.Sleep(11 * time.Second)
	x1, err := xacts()
	if err != nil {
		return 0, 0, err
	}
	claims = c1 - c0
	if probe == nil {
		return float64(claims), claims, nil
	}
	// The first probe's own transaction counts; so do the claims sent
	// during the flush wait, which the subscription counted too.
	c2 := sub.Stats().Claims
	return x1 - x0 - 1 - float64(c2-c1), claims, nil
}
