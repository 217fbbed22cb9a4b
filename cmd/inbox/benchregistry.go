package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/internal/benchkit"
	"github.com/sqlinbox/sqlinbox/migrations"
	"github.com/sqlinbox/sqlinbox/notify"
)

// benchRegistry measures what the registry costs: drains without and with
// it, alternating in one run, and the statements an idle instance sends
// without and with it (Postgres: the database's transactions).
func benchRegistry(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench registry", flag.ContinueOnError)
	db := fs.String("db", "", "database URL (required; on Postgres a database no one else uses for the idle count)")
	jobs := fs.Int("jobs", 200000, "rows to fill and drain in each drain")
	instances := fs.Int("instances", 2, "brokers, each with a pool of its own")
	workers := fs.Int("workers", 100, "workers per instance")
	rounds := fs.Int("rounds", 3, "pairs of drains (without, then with the registry; the order flips each round)")
	idle := fs.Duration("idle", 20*time.Second, "how long to count an idle instance's statements in each case (0: skip)")
	table := fs.String("table", "bench_jobs", "table to (re)create and drain")
	if err := parseFlags(ctx, fs, args); err != nil {
		return err
	}
	if *db == "" {
		return fmt.Errorf("--db is required")
	}
	setup, err := inbox.Open(*db)
	if err != nil {
		return err
	}
	defer setup.Close()
	if err := migrations.ApplyRegistry(ctx, setup.DB()); err != nil {
		return err
	}
	// cpu_us_per_job is this process's CPU (the library's, the registry's
	// included), which other load on the machine moves less than jobs/s.
	rate, cpu := map[bool][]float64{}, map[bool][]float64{}
	for r := range *rounds {
		for i, reg := range []bool{false, true} {
			if r%2 == 1 {
				reg = i == 0
			}
			first, err := benchkit.Fill(ctx, setup.DB(), *table, *jobs)
			if err != nil {
				return err
			}
			tr := benchkit.NewTracker(first, *jobs)
			cpu0 := cpuSeconds()
			res, err := benchkit.Drain(ctx, benchkit.Config{URL: *db, Table: *table, Instances: *instances, Workers: *workers, Jobs: *jobs, Registry: reg}, tr)
			if err != nil {
				return err
			}
			own := (cpuSeconds() - cpu0) * 1e6 / float64(*jobs)
			rate[reg] = append(rate[reg], res.JobsPerSec)
			cpu[reg] = append(cpu[reg], own)
			fmt.Printf("round=%d registry=%t jobs=%d instances=%d workers=%d jobs_per_sec=%.0f duplicates=%d lost=%d cpu_us_per_job=%.1f machine_cpu_us_per_job=%.1f\n",
				r+1, reg, *jobs, *instances, *workers, res.JobsPerSec, tr.Duplicates(), tr.Lost(), own, res.CPUPerJob(*jobs))
		}
	}
	mean := func(x []float64) float64 {
		s := 0.0
		for _, v := range x {
			s += v
		}
		return s / float64(len(x))
	}
	fmt.Printf("registry_off_jobs_per_sec=%.0f registry_on_jobs_per_sec=%.0f on_vs_off=%.3f off_cpu_us_per_job=%.2f on_cpu_us_per_job=%.2f\n",
		mean(rate[false]), mean(rate[true]), mean(rate[true])/mean(rate[false]), mean(cpu[false]), mean(cpu[true]))
	if *idle <= 0 || dbKind(*db) != "postgres" {
		return nil
	}
	for _, reg := range []bool{false, true} {
		n, err := idleStatements(ctx, *db, *table, reg, *idle)
		if err != nil {
			return err
		}
		fmt.Printf("idle registry=%t seconds=%.0f statements_per_sec=%.3f\n", reg, idle.Seconds(), n/idle.Seconds())
	}
	return nil
}

// idleStatements runs one idle instance (a service with one subscription,
// registered or not) for d and counts the database's transactions
// meanwhile, less the probes'.
func idleStatements(ctx context.Context, url, table string, reg bool, d time.Duration) (float64, error) {
	b, err := inbox.Open(url, inbox.WithHub(notify.NewHub()))
	if err != nil {
		return 0, err
	}
	defer b.Close()
	if _, err := benchkit.Fill(ctx, b.DB(), table, 0); err != nil {
		return 0, err
	}
	svc := inbox.NewService("bench-idle", "0", b)
	svc.Signals = false
	if reg {
		if err := svc.Register(); err != nil {
			return 0, err
		}
	}
	if _, err := inbox.Handle(svc, inbox.MustQueue[benchkit.Row](table), func(context.Context, benchkit.Row) error { return nil }); err != nil {
		return 0, err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(rctx) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	defer stop()
	<-svc.Started()
	mon, err := inbox.Open(url, inbox.WithHub(notify.NewHub()))
	if err != nil {
		return 0, err
	}
	defer mon.Close()
	xacts := func() (float64, error) {
		var n int64
		err := mon.DB().QueryRowContext(ctx, "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()").Scan(&n)
		return float64(n), err
	}
	time.Sleep(2 * time.Second) // backends flush their counts
	x0, err := xacts()
	if err != nil {
		return 0, err
	}
	time.Sleep(d)
	stop() // a registered instance's stop is one transaction more (it leaves)
	// Backends report at most once a second while busy, within ten once
	// idle: wait for the window's counts to land.
	time.Sleep(11 * time.Second)
	x1, err := xacts()
	if err != nil {
		return 0, err
	}
	fmt.Fprintf(os.Stderr, "idle registry=%t: %.0f transactions in %v\n", reg, x1-x0-2, d)
	return x1 - x0 - 2, nil // less the two probes' own
}
