package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/benchkit"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// limitsRun compares, in one run on Postgres, three drains of the same
// rows keyed over keys customers: without a limit (the control), under
// inbox.Limit("customer", n), and as a user limits rows in work today,
// running every row and retrying it when a lock of its customer with
// lock.MaxHolders(n) is held (benchkit.Config.RetryLock). Each shape is
// "n/workers"; rounds repeat the whole set.
type limitsRun struct {
	pg     string
	jobs   int
	keys   int
	shapes [][2]int // limit n, workers
	rounds int
	ways   []string // of keyed, limit, retry
}

// limitsRow is one drain of the comparison.
type limitsRow struct {
	way     string // keyed, limit, retry
	n, w    int
	res     benchkit.Result
	lost    int64
	control float64 // the keyed drain's rate of the same shape and round
}

func (lr limitsRun) run(ctx context.Context) ([]limitsRow, error) {
	db, _, err := dialect.Open(lr.pg)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	const table = "bench_limit_jobs"
	var out []limitsRow
	for round := range lr.rounds {
		for _, s := range lr.shapes {
			var control float64
			for _, way := range lr.ways {
				first, err := benchkit.Fill(ctx, db, table, lr.jobs)
				if err != nil {
					return nil, err
				}
				if err := benchkit.KeyRows(ctx, db, table, lr.keys); err != nil {
					return nil, err
				}
				tr := benchkit.NewTracker(first, lr.jobs)
				cfg := benchkit.Config{URL: lr.pg, Table: table, Instances: 1, Workers: s[1], Jobs: lr.jobs, Progress: os.Stderr, Timeout: 20 * time.Minute}
				switch way {
				case "limit":
					cfg.Limit = s[0]
				case "retry":
					cfg.RetryLock = s[0]
				}
				fmt.Fprintf(os.Stderr, "round %d: %s, n %d, %d workers\n", round+1, way, s[0], s[1])
				res, err := benchkit.Drain(ctx, cfg, tr)
				if err != nil {
					return nil, fmt.Errorf("%s drain, n %d, %d workers: %w", way, s[0], s[1], err)
				}
				if way == "keyed" {
					control = res.JobsPerSec
				}
				out = append(out, limitsRow{way: way, n: s[0], w: s[1], res: res, lost: tr.Lost() + tr.Duplicates(), control: control})
			}
		}
	}
	return out, nil
}

// limitsReport prints the comparison: per drain its rate, its ratio to the
// keyed drain of its round, and per job the claim statements, rows claimed
// (attempts), retries, and CPU of the database's backends and of the
// machine.
func limitsReport(rows []limitsRow, jobs int) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "way\tn\tworkers\tjobs/s\tvs keyed\tclaims/job\tattempts/job\tretries/job\trefused\tdb cpu us/job\tmachine cpu us/job\tlost+dup\t")
	for _, r := range rows {
		j := float64(jobs)
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%.2fx\t%.4f\t%.3f\t%.3f\t%d\t%.1f\t%.1f\t%d\t\n", r.way, r.n, r.w, r.res.JobsPerSec, r.res.JobsPerSec/r.control,
			float64(r.res.Claims)/j, float64(r.res.Claimed)/j, float64(r.res.Retried)/j, r.res.Refused, r.res.DBCPUPerJob(jobs), r.res.CPUPerJob(jobs), r.lost)
	}
	tw.Flush()
	fmt.Println("\nkeyed: the same rows drained without a limit; limit: inbox.Limit(\"customer\", n); retry: each handler takes a lock of its customer with lock.MaxHolders(n) and returns inbox.RetryAfter(50ms) when it is held.")
	fmt.Println("db cpu: the Postgres backends of the database, from /proc; machine cpu: every core, other load included.")
}

// parseLimitShapes reads "n/workers,..." (--limits).
func parseLimitShapes(s string) ([][2]int, error) {
	var out [][2]int
	for _, f := range strings.Split(s, ",") {
		var n, w int
		if _, err := fmt.Sscanf(strings.TrimSpace(f), "%d/%d", &n, &w); err != nil || n < 1 || w < 1 {
			return nil, fmt.Errorf("--limits: %q is not n/workers with both at least 1 (e.g. 1000/100)", f)
		}
		out = append(out, [2]int{n, w})
	}
	return out, nil
}
