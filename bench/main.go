// Command bench drains the same backlog, in one process and one run, with
// sqlinbox, with River, and with the bare claim and ack statements (the
// floor), on Postgres and on a SQLite file, and with --mysql on MariaDB or
// MySQL (the lease, row-lock and, on MariaDB, advisory forms beside a floor
// of bare SKIP LOCKED transactions; no River there); it prints a table and
// the ratios the targets are stated in, and draws jobs/s against workers.
//
//	cd bench && go run . --pg 'postgres://postgres@127.0.0.1:5432/bench?sslmode=disable' --sqlite /tmp/bench.db --mysql mysql://root@127.0.0.1:3306/test
//
// It is a module of its own so River and gonum stay out of the library's
// go.mod.
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/sqlinbox/sqlinbox/claim"
	"github.com/sqlinbox/sqlinbox/claim/advisory"
	"github.com/sqlinbox/sqlinbox/claim/lease"
	"github.com/sqlinbox/sqlinbox/claim/rowlock"
	"github.com/sqlinbox/sqlinbox/internal/benchkit"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// forms are the library's claim forms measured here. A form joins by one
// line; one a database cannot serve is skipped there, and one with dbs runs
// only on those.
var forms = []struct {
	name string
	form claim.Form
	dbs  []string
}{
	{"lease", lease.Form, nil},
	{"rowlock", rowlock.Form, []string{"mysql"}},
	{"advisory", advisory.Form, []string{"mysql"}},
}

// row is one measured drain.
type row struct {
	db      string
	runner  string // "sqlinbox/lease", "river", "floor"
	workers int    // workers in all (instances x workers; loops x batch for the floor)
	shape   string
	jobs    int
	res     benchkit.Result
	dups    int64
	lost    int64
	chart   bool    // a point of the sweep
	procs   int     // processes, in the instance sweep (0: one process)
	warm    float64 // the sweep's rate once warmed up (benchkit.ProcsResult), else 0
}

func main() {
	pg := flag.String("pg", envOr("POSTGRES_TEST_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "Postgres URL (empty: skip Postgres); schemas sqlinbox_bench and river_bench are made in it")
	sqlitePath := flag.String("sqlite", "/tmp/sqlinbox-bench.db", "SQLite file (empty: skip SQLite)")
	my := flag.String("mysql", "", "MariaDB/MySQL URL, mysql://user:pass@host:3306/db (empty: skip); a table bench_jobs is made in it")
	myJobs := flag.Int("mysql-jobs", 50000, "rows per drain on MariaDB/MySQL")
	pgJobs := flag.Int("pg-jobs", 200000, "rows per headline drain on Postgres")
	sqliteJobs := flag.Int("sqlite-jobs", 100000, "rows per headline drain on SQLite")
	instances := flag.Int("instances", 2, "sqlinbox instances on Postgres (SQLite: 1)")
	workers := flag.Int("workers", 100, "sqlinbox workers per instance")
	riverWorkers := flag.Int("river-workers", 2000, "River MaxWorkers")
	sweepJobs := flag.Int("sweep-jobs", 30000, "rows per drain of the chart's sweep (0: no sweep)")
	sweep := flag.String("sweep", "10,50,200", "sqlinbox workers per instance in the sweep")
	riverSweep := flag.String("river-sweep", "100,500", "River MaxWorkers in the sweep (the headline adds its own)")
	chart := flag.String("chart", "bench.png", "chart file (PNG; empty: none)")
	publishRows := flag.Int("publish-rows", 100000, "rows per publish run (sqlinbox PublishMany, River InsertMany, bare COPY); 0: no publish runs")
	publishBatch := flag.Int("publish-batch", 10000, "rows per PublishMany / InsertMany call and per COPY")
	publishRuns := flag.Int("publish-runs", 3, "publish runs of each publisher; the best is kept")
	publishOnly := flag.Bool("publish-only", false, "run only the publish runs")
	procsChart := flag.String("procs-chart", "", "also write the instance sweep's panel alone to this PNG")
	procs := flag.String("procs", "2,4,8", "Postgres instance sweep: process counts, each runner's headline workers split among them (empty: none)")
	latency := flag.String("latency", "", "run only the latency sweep on Postgres: delays added each way by an in-process Toxiproxy, e.g. 0,1ms,5ms (0: no proxy)")
	latencyJobs := flag.Int("latency-jobs", 50000, "rows per drain of the latency sweep")
	latencyRounds := flag.Int("latency-rounds", 1, "rounds of the latency sweep, sqlinbox and River taking turns to go first")
	limits := flag.String("limits", "", "run only the limits' cost on Postgres, shapes n/workers (e.g. 1000/100,1/200): the rows keyed over --limit-keys customers drained without a limit, under inbox.Limit(\"customer\", n), and by handlers that retry a row while a lock.MaxHolders(n) lock of its customer is held, in turn")
	limitJobs := flag.Int("limit-jobs", 200000, "rows per drain of --limits")
	limitKeys := flag.Int("limit-keys", 1000, "customers the rows of --limits are keyed over (id modulo)")
	limitRounds := flag.Int("limit-rounds", 1, "rounds of --limits")
	limitWays := flag.String("limit-ways", "keyed,limit,retry", "drains of --limits, in turn: keyed (no limit, the control), limit (inbox.Limit), retry (a lock in the handler)")
	deps := flag.Bool("deps", false, "run only the dependencies' cost on Postgres: --deps-jobs rows drained without a table of edges and with one present but unused, taking turns for --deps-rounds, then a chain of --chain-steps steps (each step's HandleTx publishes the next with inbox.After)")
	depsJobs := flag.Int("deps-jobs", 200000, "rows per drain of --deps")
	depsRounds := flag.Int("deps-rounds", 2, "rounds of --deps (each a drain without and one with the edges)")
	chainSteps := flag.Int("chain-steps", 10000, "steps of --deps's chain (0: none)")
	if len(os.Args) > 1 && os.Args[1] == "child" {
		childMain(os.Args[2:])
		return
	}
	cpuProfile := flag.String("cpuprofile", "", "write the bench process's CPU profile to this file (empty: none)")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		check(err)
		check(pprof.StartCPUProfile(f))
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *latency != "" {
		delays, err := parseDelays(*latency)
		check(err)
		if *pg == "" {
			check(fmt.Errorf("--latency needs --pg"))
		}
		lr := latencyRun{pg: *pg, delays: delays, jobs: *latencyJobs, rounds: max(1, *latencyRounds), instances: *instances, workers: *workers, river: *riverWorkers}
		latencyReport(lr, lr.run(ctx))
		return
	}
	if *deps {
		if *pg == "" {
			check(fmt.Errorf("--deps needs --pg"))
		}
		dr := depsRun{pg: *pg, jobs: *depsJobs, instances: *instances, workers: *workers, rounds: max(1, *depsRounds), steps: *chainSteps}
		rows, rate, err := dr.run(ctx)
		check(err)
		depsReport(rows, dr.jobs, rate, dr.steps)
		return
	}
	if *limits != "" {
		shapes, err := parseLimitShapes(*limits)
		check(err)
		if *pg == "" {
			check(fmt.Errorf("--limits needs --pg"))
		}
		for _, w := range strings.Split(*limitWays, ",") {
			if w != "keyed" && w != "limit" && w != "retry" {
				check(fmt.Errorf("--limit-ways: %q is none of keyed, limit, retry", w))
			}
		}
		lr := limitsRun{pg: *pg, jobs: *limitJobs, keys: *limitKeys, shapes: shapes, rounds: max(1, *limitRounds), ways: strings.Split(*limitWays, ",")}
		res, err := lr.run(ctx)
		check(err)
		limitsReport(res, lr.jobs)
		return
	}
	var rows []row
	add := func(r row, err error) {
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: %s %s: %v\n", r.db, r.runner, err)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "%s %s %s: %.0f jobs/s (dup %d lost %d)\n", r.db, r.runner, r.shape, r.res.JobsPerSec, r.dups, r.lost)
		rows = append(rows, r)
	}
	sw, err := ints(*sweep)
	check(err)
	rsw, err := ints(*riverSweep)
	check(err)
	ps, err := ints(*procs)
	check(err)

	type target struct {
		db        string
		url       string
		jobs      int
		instances int
	}
	var dbs []target
	if *pg != "" {
		dbs = append(dbs, target{db: "postgres", url: *pg, jobs: *pgJobs, instances: *instances})
	}
	if *sqlitePath != "" {
		dbs = append(dbs, target{db: "sqlite", url: "sqlite://" + *sqlitePath, jobs: *sqliteJobs, instances: 1})
	}
	if *my != "" {
		dbs = append(dbs, target{db: "mysql", url: *my, jobs: *myJobs, instances: *instances})
	}
	var published []publishRow
	for _, t := range dbs {
		libURL, riverURL := t.url, t.url
		if t.db == "postgres" {
			libURL = schemaURL(ctx, t.url, "sqlinbox_bench")
			riverURL = schemaURL(ctx, t.url, "river_bench")
		}
		if t.db == "mysql" {
			// The forms at the headline's shape and the bare floor, in one
			// run: no River, no sweep, no publish runs.
			check(mysqlBench(ctx, t.url, t.jobs, t.instances, *workers, add))
			continue
		}
		if *publishRows > 0 {
			p, err := publishBench(ctx, t.db, libURL, riverURL, *publishRows, *publishBatch, *publishRuns)
			check(err)
			published = append(published, p...)
		}
		if *publishOnly {
			continue
		}
		db, _, err := dialect.Open(libURL)
		check(err)
		const table = "bench_jobs"
		for _, f := range forms {
			if f.form.Supports(dialect.Of(kindOf(t.db))) != nil || (f.dbs != nil && !slices.Contains(f.dbs, t.db)) {
				continue
			}
			lib := func(jobs, inst, w int, chart bool) {
				first, err := benchkit.Fill(ctx, db, table, jobs)
				check(err)
				tr := benchkit.NewTracker(first, jobs)
				r := row{db: t.db, runner: "sqlinbox/" + f.name, workers: inst * w, shape: fmt.Sprintf("%dx%d", inst, w), jobs: jobs, chart: chart}
				fmt.Fprintf(os.Stderr, "%s %s %s, %d jobs\n", r.db, r.runner, r.shape, jobs)
				r.res, err = benchkit.Drain(ctx, benchkit.Config{URL: libURL, Table: table, Form: f.form, Instances: inst, Workers: w, Jobs: jobs, Progress: os.Stderr}, tr)
				r.dups, r.lost = tr.Duplicates(), tr.Lost()
				add(r, err)
			}
			lib(t.jobs, t.instances, *workers, true)
			if *sweepJobs > 0 {
				for _, w := range sw {
					if w != *workers {
						lib(*sweepJobs, t.instances, w, true)
					}
				}
			}
		}
		// The floor: four bare loops of a transaction a 100 rows.
		{
			first, err := benchkit.Fill(ctx, db, table, t.jobs)
			check(err)
			tr := benchkit.NewTracker(first, t.jobs)
			fmt.Fprintf(os.Stderr, "%s floor 4x100, %d jobs\n", t.db, t.jobs)
			pool, _, err := dialect.Open(libURL)
			check(err)
			pool.SetMaxOpenConns(8)
			pool.SetMaxIdleConns(8)
			res, err := benchkit.Floor(ctx, pool, table, 4, 100, tr)
			pool.Close()
			add(row{db: t.db, runner: "floor", workers: 400, shape: "4 loops x 100", jobs: t.jobs, res: res, dups: tr.Duplicates(), lost: tr.Lost()}, err)
		}
		db.Close()

		riv := func(jobs, w int, chart bool) {
			fmt.Fprintf(os.Stderr, "%s river MaxWorkers %d, %d jobs\n", t.db, w, jobs)
			var (
				res benchkit.Result
				tr  *benchkit.Tracker
				err error
			)
			if t.db == "postgres" {
				res, tr, err = riverPostgres(ctx, withParam(riverURL, "pool_max_conns", strconv.Itoa(8*t.instances)), riverRun{workers: w, jobs: jobs}, os.Stderr)
			} else {
				var rdb *sql.DB
				rdb, _, err = dialect.Open(riverURL)
				check(err)
				res, tr, err = riverSQLite(ctx, rdb, riverRun{workers: w, jobs: jobs}, os.Stderr)
				rdb.Close()
			}
			r := row{db: t.db, runner: "river", workers: w, shape: fmt.Sprintf("MaxWorkers %d", w), jobs: jobs, res: res, chart: chart}
			if tr != nil {
				r.dups, r.lost = tr.Duplicates(), tr.Lost()
			}
			add(r, err)
		}
		riv(t.jobs, *riverWorkers, true)
		if *sweepJobs > 0 {
			for _, w := range rsw {
				riv(*sweepJobs, w, true)
			}
		}
		if t.db == "postgres" {
			for _, p := range ps {
				add(libProcs(ctx, libURL, table, t.jobs, p, *workers*t.instances), nil)
				add(riverProcs(ctx, withParam(riverURL, "pool_max_conns", "8"), t.jobs, p, *riverWorkers), nil)
			}
		}
	}

	if len(rows) > 0 {
		report(rows)
	}
	if len(published) > 0 {
		fmt.Println()
		publishReport(published)
	}
	if *chart != "" && len(rows) > 0 {
		check(drawChart(*chart, rows))
		fmt.Fprintf(os.Stderr, "chart: %s\n", *chart)
	}
	if *procsChart != "" {
		check(drawProcsChart(*procsChart, rows))
		fmt.Fprintf(os.Stderr, "chart: %s\n", *procsChart)
	}
}

func report(rows []row) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "db\trunner\tshape\tjobs\tseconds\tjobs/s\twarm jobs/s\tcpu us/job\tceiling jobs/s\tduplicates\tlost\t")
	for _, r := range rows {
		cpu, ceiling, warm := "-", "-", "-"
		if c := r.res.CPUPerJob(r.jobs); c > 0 {
			cpu, ceiling = fmt.Sprintf("%.1f", c), fmt.Sprintf("%.0f", float64(runtime.NumCPU())*1e6/c)
		}
		if r.warm > 0 {
			warm = fmt.Sprintf("%.0f", r.warm)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%.2f\t%.0f\t%s\t%s\t%s\t%d\t%d\t\n", r.db, r.runner, r.shape, r.jobs, r.res.Seconds, r.res.JobsPerSec, warm, cpu, ceiling, r.dups, r.lost)
	}
	fmt.Fprintf(tw, "\nwarm jobs/s: in the instance sweep, the rate after the first tenth of the rows, when every process has started (benchkit.ProcsResult).\n")
	fmt.Fprintf(tw, "cpu us/job: the whole machine's busy CPU during the drain (this process, the database server, anything else) per job.\n")
	fmt.Fprintf(tw, "ceiling jobs/s: %d cores / cpu us/job, the rate if the drain had every core to itself.\n", runtime.NumCPU())
	tw.Flush()
	fmt.Println()
	// The headline of each runner is its first row on each database.
	head := map[string]float64{}
	for _, r := range rows {
		k := r.db + " " + r.runner
		if _, ok := head[k]; !ok {
			head[k] = r.res.JobsPerSec
		}
	}
	ratio := func(db, a, b string, want float64) {
		x, okA := head[db+" "+a]
		y, okB := head[db+" "+b]
		if !okA || !okB || y == 0 {
			return
		}
		if want == 0 {
			fmt.Printf("%s: %s / %s = %.2fx\n", db, a, b, x/y)
			return
		}
		verdict := "met"
		if x/y < want {
			verdict = "MISSED"
		}
		fmt.Printf("%s: %s / %s = %.2fx (target >= %.1fx: %s)\n", db, a, b, x/y, want, verdict)
	}
	ratio("postgres", "sqlinbox/lease", "river", 3)
	ratio("postgres", "sqlinbox/lease", "floor", 0.8)
	ratio("sqlite", "sqlinbox/lease", "river", 20)
	ratio("sqlite", "sqlinbox/lease", "floor", 0.5)
	ratio("mysql", "sqlinbox/lease", "floor", 0.5)
	ratio("mysql", "sqlinbox/rowlock", "floor", 0)
	ratio("mysql", "sqlinbox/advisory", "floor", 0)
	// MariaDB's target is on the best form as well as on the lease form.
	best, bestRate := "", 0.0
	for k, v := range head {
		if r, ok := strings.CutPrefix(k, "mysql sqlinbox/"); ok && v > bestRate {
			best, bestRate = "sqlinbox/"+r, v
		}
	}
	if best != "" {
		ratio("mysql", best, "floor", 0.6)
	}
	bad := int64(0)
	for _, r := range rows {
		bad += r.dups + r.lost
	}
	fmt.Printf("duplicates+lost over every run: %d (target 0)\n", bad)
}

func kindOf(db string) dialect.Kind {
	switch db {
	case "postgres":
		return dialect.Postgres
	case "mysql":
		return dialect.MySQL
	}
	return dialect.SQLite
}

// mysqlBench drains jobs rows with each form that serves MariaDB/MySQL at
// instances x workers, then with the bare floor (benchkit.Floor, 4
// loops of 100), one after the other in one run.
func mysqlBench(ctx context.Context, u string, jobs, instances, workers int, add func(row, error)) error {
	db, d, err := dialect.Open(u)
	if err != nil {
		return err
	}
	defer db.Close()
	// The server is read first: the advisory form serves MariaDB, not
	// MySQL 8.
	if err := d.Probe(ctx, db); err != nil {
		return err
	}
	const table = "bench_jobs"
	for _, f := range forms {
		if f.form.Supports(d) != nil || (f.dbs != nil && !slices.Contains(f.dbs, "mysql")) {
			continue
		}
		first, err := benchkit.Fill(ctx, db, table, jobs)
		if err != nil {
			return err
		}
		tr := benchkit.NewTracker(first, jobs)
		r := row{db: "mysql", runner: "sqlinbox/" + f.name, workers: instances * workers, shape: fmt.Sprintf("%dx%d", instances, workers), jobs: jobs, chart: true}
		fmt.Fprintf(os.Stderr, "mysql %s %s, %d jobs\n", r.runner, r.shape, jobs)
		r.res, err = benchkit.Drain(ctx, benchkit.Config{URL: u, Table: table, Form: f.form, Instances: instances, Workers: workers, Jobs: jobs, Progress: os.Stderr}, tr)
		r.dups, r.lost = tr.Duplicates(), tr.Lost()
		add(r, err)
	}
	first, err := benchkit.Fill(ctx, db, table, jobs)
	if err != nil {
		return err
	}
	tr := benchkit.NewTracker(first, jobs)
	fmt.Fprintf(os.Stderr, "mysql floor 4x100, %d jobs\n", jobs)
	pool, _, err := dialect.Open(u)
	if err != nil {
		return err
	}
	defer pool.Close()
	pool.SetMaxOpenConns(8)
	pool.SetMaxIdleConns(8)
	res, err := benchkit.Floor(ctx, pool, table, 4, 100, tr)
	add(row{db: "mysql", runner: "floor", workers: 400, shape: "4 loops x 100 (SKIP LOCKED + DELETE)", jobs: jobs, res: res, dups: tr.Duplicates(), lost: tr.Lost()}, err)
	return nil
}

// schemaURL makes schema on the server and returns base with search_path
// set to it.
func schemaURL(ctx context.Context, base, schema string) string {
	db, _, err := dialect.Open(base)
	check(err)
	defer db.Close()
	_, err = db.ExecContext(ctx, "CREATE SCHEMA IF NOT EXISTS "+dialect.Quote(schema))
	check(err)
	return withParam(base, "search_path", schema)
}

func withParam(raw, k, v string) string {
	u, err := url.Parse(raw)
	check(err)
	q := u.Query()
	q.Set(k, v)
	u.RawQuery = q.Encode()
	return u.String()
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", s, err)
		}
		out = append(out, n)
	}
	return out, nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}
