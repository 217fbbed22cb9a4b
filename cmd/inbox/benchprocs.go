package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/internal/benchkit"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

func init() {
	register("bench-proc", "", benchProc)
}

// benchProc is one child of `bench throughput --procs`: one broker, one
// subscription, driven by the parent over stdin and stdout.
func benchProc(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench-proc", flag.ContinueOnError)
	db := fs.String("db", "", "database URL")
	formName := fs.String("form", "lease", "claim form")
	table := fs.String("table", "bench_jobs", "table")
	workers := fs.Int("workers", 100, "workers")
	conns := fs.Int("conns", 0, "pool size")
	notifyOn := fs.Bool("notify", false, "LISTEN/NOTIFY")
	if err := parseFlags(ctx, fs, args); err != nil {
		return err
	}
	form, err := formByName(*formName)
	if err != nil {
		return err
	}
	c, err := benchkit.NewLibChild(benchkit.Config{URL: *db, Table: *table, Form: form, Workers: *workers, Conns: *conns, Notify: *notifyOn})
	if err != nil {
		return err
	}
	defer c.Close()
	return benchkit.ServeChild(ctx, os.Stdin, os.Stdout, c)
}

// procsRun is the instance sweep of `bench throughput --procs`.
type procsRun struct {
	db, form, table string
	procs           []int
	per             []int // workers per process where a split names them (PxW), else 0
	workers         int   // in all, split evenly among the processes
	conns           int
	jobs, rounds    int
	notify, waits   bool
	ownTables       bool // each process drains a table of its own (a control)
	noBlocks        bool // the table has no block sequence (a control)
	timeout         time.Duration
}

// parseProcs reads "2,4,8": process counts, each with --workers split
// among them, or PxW for P processes of W workers each ("2,8,8x100").
func parseProcs(s string) (procs, per []int, err error) {
	for _, f := range strings.Split(s, ",") {
		p, w, shaped := strings.Cut(strings.TrimSpace(f), "x")
		n, err := strconv.Atoi(p)
		k := 0
		if err == nil && shaped {
			k, err = strconv.Atoi(w)
		}
		if err != nil || n < 1 || (shaped && k < 1) {
			return nil, nil, fmt.Errorf("--procs %q: want a comma-separated list of process counts, such as 2,4,8, or PxW shapes, such as 8x100", s)
		}
		procs, per = append(procs, n), append(per, k)
	}
	return procs, per, nil
}

// benchProcs fills the table before each drain and drains it with each
// split in turn, every round, all in one run, so the ratios between the
// splits are of back-to-back drains on the same machine. The last line
// gives the median jobs/s of each split and the median of each round's
// ratio to the first split.
func benchProcs(ctx context.Context, r procsRun) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	setup, err := inbox.Open(r.db)
	if err != nil {
		return err
	}
	defer setup.Close()
	rates := make([][]float64, len(r.procs))
	ratios := make([][]float64, len(r.procs))
	warms := make([][]float64, len(r.procs))
	warmRatios := make([][]float64, len(r.procs))
	for round := range r.rounds {
		for i, p := range r.procs {
			w := r.split(i)
			tables, err := r.fill(ctx, setup, p)
			if err != nil {
				return err
			}
			var cmds []*exec.Cmd
			for j := range p {
				args := []string{"bench-proc", "--db", r.db, "--form", r.form, "--table", tables[j%len(tables)], "--workers", strconv.Itoa(w), "--conns", strconv.Itoa(r.conns)}
				if r.notify {
					args = append(args, "--notify")
				}
				cmds = append(cmds, exec.CommandContext(ctx, exe, args...))
			}
			var waits benchkit.Waits
			cfg := benchkit.ProcsConfig{Commands: cmds, Jobs: r.jobs, Timeout: r.timeout, Progress: os.Stderr}
			pg := dbKind(r.db) == "postgres"
			if r.waits && pg {
				cfg.During = func(ctx context.Context) { benchkit.SampleWaits(ctx, setup.DB(), 10*time.Millisecond, &waits) }
			}
			fmt.Fprintf(os.Stderr, "round %d: draining %d rows with %d processes x %d workers, %s form\n", round+1, r.jobs, p, w, r.form)
			c0 := benchkit.ReadDBCounters(ctx, setup.DB())
			res, derr := benchkit.DrainProcs(ctx, cfg)
			if derr != nil {
				return derr
			}
			time.Sleep(200 * time.Millisecond) // the children's backends report as they exit
			c1 := benchkit.ReadDBCounters(ctx, setup.DB())
			var remaining int64
			for _, t := range tables {
				n, err := benchkit.Remaining(context.WithoutCancel(ctx), setup.DB(), t)
				if err != nil {
					return err
				}
				remaining += n
			}
			rates[i] = append(rates[i], res.JobsPerSec)
			warms[i] = append(warms[i], res.WarmJobsPerSec)
			if i > 0 {
				ratios[i] = append(ratios[i], res.JobsPerSec/rates[0][round])
				warmRatios[i] = append(warmRatios[i], res.WarmJobsPerSec/warms[0][round])
			}
			line := fmt.Sprintf("round=%d procs=%d workers=%d form=%s jobs=%d seconds=%.3f jobs_per_sec=%.0f warm_jobs_per_sec=%.0f claims=%d rows_per_claim=%.1f duplicates=%d lost=%d machine_cpu_us_per_job=%.1f",
				round+1, p, w, r.form, r.jobs, res.Seconds, res.JobsPerSec, res.WarmJobsPerSec, res.Claims, float64(r.jobs)/float64(max(res.Claims, 1)),
				max(0, res.Handled-int64(r.jobs)), remaining, res.CPUPerJob(r.jobs))
			if pg {
				line += " " + benchkit.PerJob(c0, c1, r.jobs)
			}
			if r.waits && pg {
				line += " waits: " + waits.String()
			}
			fmt.Println(line)
		}
	}
	var sum []string
	for i, p := range r.procs {
		shape := fmt.Sprintf("%dx%d", p, r.split(i))
		sum = append(sum, fmt.Sprintf("sweep_%s_jobs_per_sec=%.0f warm_%s_jobs_per_sec=%.0f", shape, median(rates[i]), shape, median(warms[i])))
		if i > 0 {
			sum = append(sum, fmt.Sprintf("ratio_%s=%.2f warm_ratio_%s=%.2f", shape, median(ratios[i]), shape, median(warmRatios[i])))
		}
	}
	fmt.Printf("form=%s db=%s jobs=%d rounds=%d %s\n", r.form, dbKind(r.db), r.jobs, r.rounds, strings.Join(sum, " "))
	return nil
}

// fill writes the rows of a drain by p processes and returns the tables the
// processes drain: the one table, or with ownTables one table a process
// holding its share of the rows (the bound of any way of sharing one
// table among p processes: theirs never meet).
func (r procsRun) fill(ctx context.Context, setup *inbox.Broker, p int) ([]string, error) {
	if !r.ownTables {
		_, err := benchkit.Fill(ctx, setup.DB(), r.table, r.jobs)
		if err == nil && r.noBlocks {
			_, err = setup.DB().ExecContext(ctx, "DROP SEQUENCE IF EXISTS "+dialect.BlockSequenceName(r.table))
		}
		return []string{r.table}, err
	}
	var tables []string
	for j := range p {
		t := fmt.Sprintf("%s_%d", r.table, j)
		n := r.jobs / p
		if j == p-1 {
			n = r.jobs - n*(p-1)
		}
		if _, err := benchkit.Fill(ctx, setup.DB(), t, n); err != nil {
			return nil, err
		}
		tables = append(tables, t)
	}
	return tables, nil
}

// split is the workers per process of the i-th split.
func (r procsRun) split(i int) int {
	if r.per[i] > 0 {
		return r.per[i]
	}
	return max(1, r.workers/r.procs[i])
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return -1
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
