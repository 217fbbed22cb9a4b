package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/sqlinbox/sqlinbox/claim/lease"
	"github.com/sqlinbox/sqlinbox/internal/benchkit"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// The instance sweep: the same backlog drained by P separate processes of
// this binary (its child mode), sqlinbox with the headline's workers split
// among them, River with its MaxWorkers split likewise. The parent fills
// the table, starts the children, and sums what they acknowledged
// (benchkit.DrainProcs).

// childMain is the child mode: bench child lib|river URL TABLE WORKERS.
func childMain(args []string) {
	fs := flag.NewFlagSet("bench child", flag.ExitOnError)
	kind := fs.String("kind", "lib", "lib or river")
	url := fs.String("url", "", "database URL")
	table := fs.String("table", "bench_jobs", "sqlinbox's table")
	workers := fs.Int("workers", 100, "workers (River: MaxWorkers)")
	check(fs.Parse(args))
	ctx := context.Background()
	var c benchkit.Child
	switch *kind {
	case "lib":
		lc, err := benchkit.NewLibChild(benchkit.Config{URL: *url, Table: *table, Form: lease.Form, Workers: *workers})
		check(err)
		defer lc.Close()
		c = lc
	case "river":
		rc, err := newRiverChild(ctx, *url, *workers)
		check(err)
		defer rc.pool.Close()
		c = rc
	default:
		check(fmt.Errorf("unknown child kind %q", *kind))
	}
	check(benchkit.ServeChild(ctx, os.Stdin, os.Stdout, c))
}

// childCommands are p children of this binary.
func childCommands(ctx context.Context, p int, args ...string) []*exec.Cmd {
	exe, err := os.Executable()
	check(err)
	var cmds []*exec.Cmd
	for range p {
		cmds = append(cmds, exec.CommandContext(ctx, exe, append([]string{"child"}, args...)...))
	}
	return cmds
}

// libProcs drains jobs rows with p processes of workers/p sqlinbox workers.
func libProcs(ctx context.Context, libURL, table string, jobs, p, workers int) row {
	db, _, err := dialect.Open(libURL)
	check(err)
	defer db.Close()
	_, err = benchkit.Fill(ctx, db, table, jobs)
	check(err)
	w := max(1, workers/p)
	fmt.Fprintf(os.Stderr, "postgres sqlinbox/lease %d processes x %d, %d jobs\n", p, w, jobs)
	res, err := benchkit.DrainProcs(ctx, benchkit.ProcsConfig{Jobs: jobs, Progress: os.Stderr,
		Commands: childCommands(ctx, p, "--kind", "lib", "--url", libURL, "--table", table, "--workers", strconv.Itoa(w))})
	check(err)
	lost, err := benchkit.Remaining(ctx, db, table)
	check(err)
	return row{db: "postgres", runner: "sqlinbox/lease", procs: p, workers: p * w, shape: fmt.Sprintf("%d procs x %d", p, w), jobs: jobs,
		res: res.Result, warm: res.WarmJobsPerSec, dups: max(0, res.Handled-int64(jobs)), lost: lost}
}

// riverProcs drains jobs River jobs with p processes of workers/p
// MaxWorkers each.
func riverProcs(ctx context.Context, riverURL string, jobs, p, workers int) row {
	w := max(1, workers/p)
	pool, err := riverFillOnly(ctx, riverURL, jobs)
	check(err)
	defer pool.Close()
	fmt.Fprintf(os.Stderr, "postgres river %d processes x MaxWorkers %d, %d jobs\n", p, w, jobs)
	res, err := benchkit.DrainProcs(ctx, benchkit.ProcsConfig{Jobs: jobs, Progress: os.Stderr,
		Commands: childCommands(ctx, p, "--kind", "river", "--url", riverURL, "--workers", strconv.Itoa(w))})
	check(err)
	var lost int64
	check(pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE state <> 'completed'").Scan(&lost))
	return row{db: "postgres", runner: "river", procs: p, workers: p * w, shape: fmt.Sprintf("%d procs x MaxWorkers %d", p, w), jobs: jobs,
		res: res.Result, warm: res.WarmJobsPerSec, dups: max(0, res.Handled-int64(jobs)), lost: lost}
}

// riverFillOnly migrates River's tables, empties them and inserts jobs
// no-op jobs, as riverPostgres does before its drain.
func riverFillOnly(ctx context.Context, url string, jobs int) (*pgxpool.Pool, error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, err
	}
	drv := riverpgxv5.New(pool)
	if err := riverMigrate(ctx, drv); err != nil {
		pool.Close()
		return nil, err
	}
	benchkit.Checkpoint(ctx, func(ctx context.Context, q string) error {
		_, err := pool.Exec(ctx, q)
		return err
	})
	if _, err := pool.Exec(ctx, "TRUNCATE river_job RESTART IDENTITY"); err != nil {
		pool.Close()
		return nil, err
	}
	c, err := river.NewClient(drv, &river.Config{Logger: quiet()})
	if err == nil {
		err = riverFill(ctx, c, jobs)
	}
	if err == nil {
		_, err = pool.Exec(ctx, "VACUUM ANALYZE river_job")
	}
	if err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// riverChild is one process's River client at the bench's settings.
type riverChild struct {
	pool    *pgxpool.Pool
	c       *river.Client[pgx.Tx]
	handled atomic.Int64
	done    atomic.Int64
}

type countWorker struct {
	river.WorkerDefaults[noopArgs]
	n *atomic.Int64
}

func (w *countWorker) Work(context.Context, *river.Job[noopArgs]) error {
	w.n.Add(1)
	return nil
}

func newRiverChild(ctx context.Context, url string, maxWorkers int) (*riverChild, error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, err
	}
	rc := &riverChild{pool: pool}
	err = benchkit.Warm(int(pool.Config().MaxConns), func() (func(), error) {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		return conn.Release, conn.Ping(ctx)
	})
	if err != nil {
		pool.Close()
		return nil, err
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &countWorker{n: &rc.handled})
	rc.c, err = river.NewClient(riverpgxv5.New(pool), &river.Config{
		Logger:            quiet(),
		FetchCooldown:     2 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: maxWorkers}},
		Workers:           workers,
	})
	if err != nil {
		pool.Close()
		return nil, err
	}
	return rc, nil
}

func (rc *riverChild) Run(ctx context.Context) error {
	events, cancel := rc.c.SubscribeConfig(&river.SubscribeConfig{Kinds: []river.EventKind{river.EventKindJobCompleted}, ChanSize: 100000})
	defer cancel()
	if err := rc.c.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	for {
		select {
		case <-events:
			rc.done.Add(1)
		case <-ctx.Done():
			stopCtx, stop := context.WithTimeout(context.Background(), 30*time.Second)
			defer stop()
			return rc.c.Stop(stopCtx)
		}
	}
}

func (rc *riverChild) Counts() (handled, acked, claims int64) {
	return rc.handled.Load(), rc.done.Load(), 0
}
