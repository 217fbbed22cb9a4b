package main

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/riverdriver/riversqlite"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/internal/benchkit"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/notify"
)

// publishRow is one line of the publish table: rows written by a runner,
// batch rows a call, the best of runs.
type publishRow struct {
	db, runner string
	batch      int
	res        benchkit.Published
}

// publishBench writes rows rows, batch a call, three ways on one database:
// sqlinbox's PublishMany, River's InsertMany (ids returned, like
// PublishMany) and the bare floor (COPY on Postgres), each the best of runs.
func publishBench(ctx context.Context, kind, libURL, riverURL string, rows, batch, runs int) ([]publishRow, error) {
	b, err := inbox.Open(libURL, inbox.WithHub(notify.NewHub()))
	if err != nil {
		return nil, err
	}
	defer b.Close()
	const table = "bench_publish"
	bare := "copy"
	if kind == "sqlite" {
		bare = "insert a row, one tx"
	}
	best := map[string]benchkit.Published{}
	for range runs {
		for _, r := range []struct {
			name string
			run  func() (benchkit.Published, error)
		}{
			{"sqlinbox PublishMany", func() (benchkit.Published, error) { return benchkit.Publish(ctx, b, table, rows, batch) }},
			{"river InsertMany", func() (benchkit.Published, error) { return riverPublish(ctx, kind, riverURL, rows, batch) }},
			{"bare " + bare, func() (benchkit.Published, error) { return benchkit.Bare(ctx, b.DB(), libURL, table, rows, batch) }},
		} {
			p, err := r.run()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", r.name, err)
			}
			fmt.Fprintf(os.Stderr, "%s publish %s: %.0f rows/s\n", kind, r.name, p.RowsPerSec)
			if p.RowsPerSec > best[r.name].RowsPerSec {
				best[r.name] = p
			}
		}
	}
	var out []publishRow
	for _, name := range []string{"sqlinbox PublishMany", "river InsertMany", "bare " + bare} {
		out = append(out, publishRow{db: kind, runner: name, batch: batch, res: best[name]})
	}
	return out, nil
}

// riverPublish empties River's job table and inserts rows no-op jobs with
// InsertMany, batch a call, by an insert-only client.
func riverPublish(ctx context.Context, kind, url string, rows, batch int) (benchkit.Published, error) {
	params := make([]river.InsertManyParams, 0, batch)
	timed := func(insert func([]river.InsertManyParams) (int, error)) (benchkit.Published, error) {
		start, cpu0 := time.Now(), benchkit.MachineCPU()
		for done := 0; done < rows; done += batch {
			params = params[:0]
			for range min(batch, rows-done) {
				params = append(params, river.InsertManyParams{Args: noopArgs{}})
			}
			n, err := insert(params)
			if err != nil {
				return benchkit.Published{}, err
			}
			if n != len(params) {
				return benchkit.Published{}, fmt.Errorf("river InsertMany returned %d results for %d jobs", n, len(params))
			}
		}
		took, cpu := time.Since(start), benchkit.MachineCPU()
		if cpu >= 0 && cpu0 >= 0 {
			cpu -= cpu0
		}
		return benchkit.Published{Rows: rows, Seconds: took.Seconds(), RowsPerSec: float64(rows) / took.Seconds(), MachineCPU: cpu}, nil
	}
	if kind == "postgres" {
		pool, err := pgxpool.New(ctx, url)
		if err != nil {
			return benchkit.Published{}, err
		}
		defer pool.Close()
		drv := riverpgxv5.New(pool)
		if err := riverMigrate(ctx, drv); err != nil {
			return benchkit.Published{}, err
		}
		if _, err := pool.Exec(ctx, "TRUNCATE river_job RESTART IDENTITY"); err != nil {
			return benchkit.Published{}, err
		}
		benchkit.Checkpoint(ctx, func(ctx context.Context, q string) error { _, err := pool.Exec(ctx, q); return err })
		c, err := river.NewClient(drv, &river.Config{Logger: quiet()})
		if err != nil {
			return benchkit.Published{}, err
		}
		return timed(func(p []river.InsertManyParams) (int, error) {
			res, err := c.InsertMany(ctx, p)
			return len(res), err
		})
	}
	db, _, err := dialect.Open(url)
	if err != nil {
		return benchkit.Published{}, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	drv := riversqlite.New(db)
	if err := riverMigrate(ctx, drv); err != nil {
		return benchkit.Published{}, err
	}
	if _, err := db.ExecContext(ctx, "DELETE FROM river_job"); err != nil {
		return benchkit.Published{}, err
	}
	c, err := river.NewClient(drv, &river.Config{Logger: quiet()})
	if err != nil {
		return benchkit.Published{}, err
	}
	return timed(func(p []river.InsertManyParams) (int, error) {
		res, err := c.InsertMany(ctx, p)
		return len(res), err
	})
}

// publishReport prints the publish table and the ratios the issue asks for.
func publishReport(rows []publishRow) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "db\tpublisher\trows\tbatch\tseconds\trows/s\tcpu us/row\t")
	for _, r := range rows {
		cpu := "-"
		if c := r.res.CPUPerRow(); c > 0 {
			cpu = fmt.Sprintf("%.1f", c)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.2f\t%.0f\t%s\t\n", r.db, r.runner, r.res.Rows, r.batch, r.res.Seconds, r.res.RowsPerSec, cpu)
	}
	tw.Flush()
	rate := map[string]float64{}
	for _, r := range rows {
		rate[r.db+" "+r.runner] = r.res.RowsPerSec
	}
	for _, db := range []string{"postgres", "sqlite"} {
		lib := rate[db+" sqlinbox PublishMany"]
		if lib == 0 {
			continue
		}
		verdict := func(x, want float64) string {
			if x >= want {
				return "met"
			}
			return "MISSED"
		}
		if r := rate[db+" river InsertMany"]; r > 0 {
			fmt.Printf("%s publish: PublishMany / River InsertMany = %.2fx (target >= 1: %s)\n", db, lib/r, verdict(lib/r, 1))
		}
		if c := rate[db+" bare copy"]; c > 0 {
			fmt.Printf("%s publish: PublishMany / bare COPY = %.2fx (target >= 0.8: %s)\n", db, lib/c, verdict(lib/c, 0.8))
		}
	}
}
