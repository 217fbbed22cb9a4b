package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"

	"github.com/sqlinbox/sqlinbox/claim/lease"
	"github.com/sqlinbox/sqlinbox/internal/benchkit"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// latencyRun is the sweep across a network: the same drains with a delay
// added to every byte each way between the process and Postgres.
type latencyRun struct {
	pg        string // the server's URL
	delays    []time.Duration
	jobs      int
	rounds    int
	instances int // sqlinbox instances, each a pool of the library's default size
	workers   int // sqlinbox workers per instance
	river     int // River MaxWorkers; its pool has 8 connections per sqlinbox instance
}

// latencyRow is one round at one delay: the three drains of it.
type latencyRow struct {
	delay              time.Duration
	round              int
	lib, river, floor  benchkit.Result
	dups, lost         int64
	libFirst           bool
	libClaims, floorTx int64
}

// parseDelays reads --latency: "0,1ms,5ms" (a bare 0 is no delay). The
// delay is applied in whole milliseconds each way, as Toxiproxy takes it.
func parseDelays(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		if f == "0" {
			out = append(out, 0)
			continue
		}
		d, err := time.ParseDuration(f)
		if err != nil || d < 0 || d%time.Millisecond != 0 {
			return nil, fmt.Errorf("--latency %q: %q is not 0 or a whole number of milliseconds (1ms, 5ms)", s, f)
		}
		out = append(out, d)
	}
	return out, nil
}

// delayProxy starts a Toxiproxy in this process in front of upstream
// (host:port) that holds every chunk for d in each direction, and returns
// its address. No separate toxiproxy server runs: the proxy is the
// library's, its API never listens.
func delayProxy(upstream string, d time.Duration) (*toxiproxy.Proxy, error) {
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, "postgres", "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("toxiproxy in front of %s: %w", upstream, err)
	}
	for _, stream := range []string{"upstream", "downstream"} {
		body := fmt.Sprintf(`{"name":"latency_%s","type":"latency","stream":%q,"attributes":{"latency":%d}}`, stream, stream, d.Milliseconds())
		if _, err := p.Toxics.AddToxicJson(strings.NewReader(body)); err != nil {
			p.Stop()
			return nil, fmt.Errorf("toxiproxy latency %v %s: %w", d, stream, err)
		}
	}
	return p, nil
}

// viaProxy is raw with its host and port replaced by addr.
func viaProxy(raw, addr string) string {
	u, err := url.Parse(raw)
	check(err)
	u.Host = addr
	return u.String()
}

// run drains each round at each delay: sqlinbox and River, the order of the
// two flipped each round, then the floor. Rows are written straight to the
// server before each drain's clock starts; only the drains go through the
// proxy.
func (lr latencyRun) run(ctx context.Context) []latencyRow {
	libURL := schemaURL(ctx, lr.pg, "sqlinbox_bench")
	riverURL := schemaURL(ctx, lr.pg, "river_bench")
	u, err := url.Parse(lr.pg)
	check(err)
	db, _, err := dialect.Open(libURL)
	check(err)
	defer db.Close()
	const table = "bench_jobs"
	var out []latencyRow
	for round := range lr.rounds {
		for _, d := range lr.delays {
			lib, riv := libURL, riverURL
			var proxy *toxiproxy.Proxy
			if d > 0 {
				proxy, err = delayProxy(u.Host, d)
				check(err)
				lib, riv = viaProxy(libURL, proxy.Listen), viaProxy(riverURL, proxy.Listen)
			}
			r := latencyRow{delay: d, round: round + 1, libFirst: round%2 == 0}
			libDrain := func() {
				first, err := benchkit.Fill(ctx, db, table, lr.jobs)
				check(err)
				tr := benchkit.NewTracker(first, lr.jobs)
				fmt.Fprintf(os.Stderr, "latency %v round %d: sqlinbox/lease %dx%d, %d jobs\n", d, r.round, lr.instances, lr.workers, lr.jobs)
				r.lib, err = benchkit.Drain(ctx, benchkit.Config{URL: lib, Table: table, Form: lease.Form, Instances: lr.instances, Workers: lr.workers, Jobs: lr.jobs, Progress: os.Stderr}, tr)
				check(err)
				r.dups, r.lost, r.libClaims = r.dups+tr.Duplicates(), r.lost+tr.Lost(), r.lib.Claims
			}
			riverDrain := func() {
				fmt.Fprintf(os.Stderr, "latency %v round %d: river MaxWorkers %d, %d jobs\n", d, r.round, lr.river, lr.jobs)
				res, tr, err := riverPostgres(ctx, withParam(riv, "pool_max_conns", strconv.Itoa(8*lr.instances)), riverRun{workers: lr.river, jobs: lr.jobs}, os.Stderr)
				check(err)
				r.river, r.dups, r.lost = res, r.dups+tr.Duplicates(), r.lost+tr.Lost()
			}
			if r.libFirst {
				libDrain()
				riverDrain()
			} else {
				riverDrain()
				libDrain()
			}
			{
				first, err := benchkit.Fill(ctx, db, table, lr.jobs)
				check(err)
				tr := benchkit.NewTracker(first, lr.jobs)
				fmt.Fprintf(os.Stderr, "latency %v round %d: floor 4x100, %d jobs\n", d, r.round, lr.jobs)
				pool, _, err := dialect.Open(lib)
				check(err)
				pool.SetMaxOpenConns(8)
				pool.SetMaxIdleConns(8)
				r.floor, err = benchkit.Floor(ctx, pool, table, 4, 100, tr)
				pool.Close()
				check(err)
				r.dups, r.lost, r.floorTx = r.dups+tr.Duplicates(), r.lost+tr.Lost(), r.floor.Claims
			}
			if proxy != nil {
				proxy.Stop()
			}
			fmt.Fprintf(os.Stderr, "latency %v round %d: sqlinbox %.0f, river %.0f, floor %.0f jobs/s: %.2fx River, %.2fx the floor\n",
				d, r.round, r.lib.JobsPerSec, r.river.JobsPerSec, r.floor.JobsPerSec, r.lib.JobsPerSec/r.river.JobsPerSec, r.lib.JobsPerSec/r.floor.JobsPerSec)
			out = append(out, r)
		}
	}
	return out
}

// latencyTargets are the ratios to River each delay is held to (each way);
// the floor's, on loopback only.
var latencyTargets = map[time.Duration]float64{0: 3, time.Millisecond: 3, 5 * time.Millisecond: 2.5}

const floorTarget = 0.8

func latencyReport(lr latencyRun, rows []latencyRow) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "added each way\tround\tfirst\tsqlinbox jobs/s\tclaims\tRiver jobs/s\tfloor jobs/s\tfloor txs\tsqlinbox / River\tsqlinbox / floor\tcpu us/job sqlinbox\tRiver\tfloor\t\n")
	for _, r := range rows {
		first := "River"
		if r.libFirst {
			first = "sqlinbox"
		}
		fmt.Fprintf(tw, "%v\t%d\t%s\t%.0f\t%d\t%.0f\t%.0f\t%d\t%.2fx\t%.2fx\t%s\t%s\t%s\t\n", r.delay, r.round, first,
			r.lib.JobsPerSec, r.libClaims, r.river.JobsPerSec, r.floor.JobsPerSec, r.floorTx,
			r.lib.JobsPerSec/r.river.JobsPerSec, r.lib.JobsPerSec/r.floor.JobsPerSec,
			cpuJob(r.lib, lr.jobs), cpuJob(r.river, lr.jobs), cpuJob(r.floor, lr.jobs))
	}
	tw.Flush()
	fmt.Printf("\nsqlinbox %dx%d (pools of the library's default size), River MaxWorkers %d (a pgxpool of %d), floor: 4 loops of a transaction a 100 rows (SELECT ... ORDER BY id LIMIT 100 FOR UPDATE SKIP LOCKED, one DELETE, COMMIT) on 8 connections; %d jobs a drain; the delay is Toxiproxy's, in this process, on every chunk each way (0: no proxy).\n",
		lr.instances, lr.workers, lr.river, 8*lr.instances, lr.jobs)
	var bad int64
	for _, d := range lr.delays {
		var ratios, floors []float64
		for _, r := range rows {
			if r.delay == d {
				ratios = append(ratios, r.lib.JobsPerSec/r.river.JobsPerSec)
				floors = append(floors, r.lib.JobsPerSec/r.floor.JobsPerSec)
				bad += r.dups + r.lost
			}
		}
		line := fmt.Sprintf("latency %v each way: sqlinbox / River median %.2fx of %d", d, median(ratios), len(ratios))
		if want, ok := latencyTargets[d]; ok {
			line += fmt.Sprintf(" (target >= %.1fx: %s)", want, verdict(median(ratios) >= want))
		}
		line += fmt.Sprintf("; sqlinbox / floor median %.2fx", median(floors))
		if d == 0 {
			line += fmt.Sprintf(" (target >= %.1fx: %s)", floorTarget, verdict(median(floors) >= floorTarget))
		}
		fmt.Println(line)
	}
	fmt.Printf("duplicates+lost over every run: %d (target 0)\n", bad)
}

func cpuJob(r benchkit.Result, jobs int) string {
	if c := r.CPUPerJob(jobs); c > 0 {
		return fmt.Sprintf("%.1f", c)
	}
	return "-"
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}
