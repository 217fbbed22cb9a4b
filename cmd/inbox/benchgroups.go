package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/internal/benchkit"
	"github.com/sqlinbox/sqlinbox/notify"
)

// benchGroups measures the idle cost of one broker with N group
// subscriptions on one table, for each N of --groups: statements a second
// (on Postgres the database's transactions, so a database no one else
// uses; on MariaDB the statements the broker's connections sent, counted
// in process), resident memory and goroutines, and the pickup of a row
// published into the last group.
func benchGroups(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench groups", flag.ContinueOnError)
	db := fs.String("db", "", "Postgres URL (a database no one else uses) or MariaDB/MySQL URL; required")
	groups := fs.String("groups", "1,10,100,1000", "group subscriptions per case")
	seconds := fs.Int("seconds", 10, "idle window per case")
	table := fs.String("table", "bench_groups", "table to (re)create")
	memProfile := fs.String("memprofile", "", "write a heap profile to this file at the end of each case's idle window (the last case's stays)")
	if err := parseFlags(ctx, fs, args); err != nil {
		return err
	}
	if dbKind(*db) == "sqlite" {
		return fmt.Errorf("--db: bench groups counts the server's statements: it needs Postgres or MariaDB")
	}
	if *memProfile != "" {
		runtime.MemProfileRate = 512 // finer than the default, for the subscriptions' few kB each
	}
	var out []string
	for _, f := range strings.Split(*groups, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("--groups %q: want a list of counts such as 1,10,100", *groups)
		}
		line, err := groupsCase(ctx, *db, *table, n, time.Duration(*seconds)*time.Second, *memProfile)
		if err != nil {
			return err
		}
		out = append(out, line)
	}
	fmt.Printf("db=%s seconds=%d %s\n", dbKind(*db), *seconds, strings.Join(out, " "))
	return nil
}

// groupRow is the reference table's row with its group column.
type groupRow struct {
	ID          int64      `db:"id" inbox:"id,generated"`
	LockedUntil *time.Time `db:"locked_until" inbox:"locked_until"`
	Group       string     `db:"group_name" inbox:"group"`
	Payload     []byte     `db:"payload" inbox:"payload"`
	Attempts    int        `db:"attempts" inbox:"attempts"`
}

func currentRSSMB() float64 {
	mb, ok := rssMB()
	if !ok {
		return -1
	}
	return mb
}

func groupsCase(ctx context.Context, url, table string, n int, d time.Duration, memProfile string) (string, error) {
	var sent atomic.Int64
	var b *inbox.Broker
	var err error
	if dbKind(url) == "mysql" {
		var pool *sql.DB
		if pool, err = countedMySQL(url, &sent); err == nil {
			defer pool.Close()
			b, err = inbox.New(pool, inbox.WithHub(notify.NewHub()))
		}
	} else {
		b, err = inbox.Open(url, inbox.WithHub(notify.NewHub()))
	}
	if err != nil {
		return "", err
	}
	defer b.Close()
	if _, err := benchkit.Fill(ctx, b.DB(), table, 0); err != nil {
		return "", err
	}
	q := inbox.MustQueue[groupRow](table)
	runtime.GC()
	rss0 := currentRSSMB()
	g0 := runtime.NumGoroutine()
	s := &starts{at: map[int64]chan time.Time{}}
	rctx, cancel := context.WithCancel(ctx)
	var dones []chan struct{}
	defer func() {
		cancel()
		for _, d := range dones {
			<-d
		}
	}()
	var last *inbox.Subscription
	for i := range n {
		sub, err := inbox.Subscribe(b, q.Group("g"+strconv.Itoa(i)), func(ctx context.Context, r groupRow) error { return s.handler(ctx, benchkit.Row{ID: r.ID}) }, inbox.Workers(1))
		if err != nil {
			return "", err
		}
		done := make(chan struct{})
		dones = append(dones, done)
		go func() { defer close(done); _ = sub.Run(rctx) }()
		last = sub
	}
	wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
	defer wcancel()
	if err := last.WaitIdle(wctx); err != nil {
		return "", err
	}
	mon, err := inbox.Open(url, inbox.WithHub(notify.NewHub()))
	if err != nil {
		return "", err
	}
	defer mon.Close()
	xacts := func() (int64, error) {
		var x int64
		err := mon.DB().QueryRowContext(ctx, "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()").Scan(&x)
		return x, err
	}
	if dbKind(url) == "mysql" {
		// The broker's own statements, counted by its connections; the
		// window's count below takes one off for the monitor's read,
		// which this count does not see.
		reads := int64(0)
		xacts = func() (int64, error) { r := reads; reads++; return sent.Load() + r, nil }
	}
	// Backends report their counts within ten seconds of going idle, and
	// the first claims of every subscription but the last may still be
	// running: the setup's land before the window opens.
	time.Sleep(11 * time.Second)
	if dbKind(url) == "mysql" {
		// Under load 1000 first claims take longer: wait (up to a minute)
		// until two seconds see no more than a poll's few statements.
		for range 30 {
			before := sent.Load()
			time.Sleep(2 * time.Second)
			if sent.Load()-before <= 4 {
				break
			}
		}
	}
	x0, err := xacts()
	if err != nil {
		return "", err
	}
	cpu0 := cpuSeconds()
	time.Sleep(d)
	cpu := cpuSeconds() - cpu0
	runtime.GC()
	rss := currentRSSMB()
	goroutines := runtime.NumGoroutine() - g0
	memClasses(os.Stderr, n)
	if memProfile != "" {
		if err := writeHeapProfile(memProfile); err != nil {
			return "", err
		}
	}
	// Backends report within a second of going idle, at most once a second
	// while busy.
	time.Sleep(2 * time.Second)
	x1, err := xacts()
	if err != nil {
		return "", err
	}
	stmts := float64(x1-x0-1) / (d + 2*time.Second).Seconds()
	// Rows published into the last group, through the broker (its hub
	// wakes the subscriptions): the median of five.
	var lat []time.Duration
	for range 5 {
		t0 := time.Now()
		id, err := inbox.Publish(ctx, b, q.Group("g"+strconv.Itoa(n-1)), groupRow{Payload: []byte("{}")})
		if err != nil {
			return "", err
		}
		at, err := s.wait(ctx, id)
		if err != nil {
			return "", err
		}
		lat = append(lat, at.Sub(t0))
	}
	pickup, _ := pcts(lat)
	fmt.Fprintf(os.Stderr, "%d groups: %.1f statements/s, rss +%.1f MB, %d goroutines, %.1f%% of a core, pickup %.1f ms\n",
		n, stmts, rss-rss0, goroutines, cpu*100/d.Seconds(), pickup)
	return fmt.Sprintf("g%d_statements_per_sec=%.2f g%d_rss_mb=%.1f g%d_goroutines=%d g%d_core_pct=%.1f g%d_pickup_ms=%.2f",
		n, stmts, n, rss-rss0, n, goroutines, n, cpu*100/d.Seconds(), n, pickup), nil
}

// memClasses writes where the runtime's memory is: live objects,
// goroutine stacks, and heap kept free (not yet returned to the system).
func memClasses(w io.Writer, n int) {
	samples := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/stacks:bytes"}, {Name: "/memory/classes/heap/free:bytes"}}
	metrics.Read(samples)
	mb := func(i int) float64 { return float64(samples[i].Value.Uint64()) / (1 << 20) }
	fmt.Fprintf(w, "%d groups: heap objects %.1f MB, stacks %.1f MB, free heap %.1f MB\n", n, mb(0), mb(1), mb(2))
}
