package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/sqlinbox/sqlinbox/internal/benchkit"
)

type noopArgs struct{}

func (noopArgs) Kind() string { return "noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
	tr func() *benchkit.Tracker
}

func (w *noopWorker) Work(_ context.Context, job *river.Job[noopArgs]) error {
	w.tr().Handle(job.ID)
	return nil
}

// riverRun is one River drain: River's own benchmark settings (MaxWorkers,
// FetchCooldown 2 ms, FetchPollInterval 20 ms, a no-op worker).
type riverRun struct {
	workers int
	jobs    int
}

// riverPostgres drains jobs River jobs from a pool on url (whose
// search_path names River's schema), migrating River's tables first.
func riverPostgres(ctx context.Context, url string, r riverRun, progress io.Writer) (benchkit.Result, *benchkit.Tracker, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return benchkit.Result{}, nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return benchkit.Result{}, nil, err
	}
	defer pool.Close()
	drv := riverpgxv5.New(pool)
	if err := riverMigrate(ctx, drv); err != nil {
		return benchkit.Result{}, nil, err
	}
	if _, err := pool.Exec(ctx, "TRUNCATE river_job RESTART IDENTITY"); err != nil {
		return benchkit.Result{}, nil, err
	}
	benchkit.Checkpoint(ctx, func(ctx context.Context, q string) error {
		_, err := pool.Exec(ctx, q)
		return err
	})
	return riverDrain(ctx, drv, r, progress, func(ctx context.Context, c *river.Client[pgx.Tx]) error {
		return riverFill(ctx, c, r.jobs)
	}, func(ctx context.Context) (int64, int64, error) {
		var lo, n int64
		err := pool.QueryRow(ctx, "SELECT coalesce(min(id), 0), count(*) FROM river_job WHERE state = 'available'").Scan(&lo, &n)
		return lo, n, err
	}, func(ctx context.Context) error {
		_, err := pool.Exec(ctx, "VACUUM ANALYZE river_job")
		return err
	})
}

// riverSQLite drains jobs River jobs from a SQLite file, one connection as
// River's SQLite driver asks.
func riverSQLite(ctx context.Context, db *sql.DB, r riverRun, progress io.Writer) (benchkit.Result, *benchkit.Tracker, error) {
	db.SetMaxOpenConns(1)
	drv := riversqlite.New(db)
	if err := riverMigrate(ctx, drv); err != nil {
		return benchkit.Result{}, nil, err
	}
	for _, q := range []string{"DELETE FROM river_job", "DELETE FROM sqlite_sequence WHERE name = 'river_job'"} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return benchkit.Result{}, nil, err
		}
	}
	return riverDrain(ctx, drv, r, progress, func(ctx context.Context, c *river.Client[*sql.Tx]) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := riverFillTx(ctx, c, tx, r.jobs); err != nil {
			return err
		}
		return tx.Commit()
	}, func(ctx context.Context) (int64, int64, error) {
		var lo, n int64
		err := db.QueryRowContext(ctx, "SELECT coalesce(min(id), 0), count(*) FROM river_job WHERE state = 'available'").Scan(&lo, &n)
		return lo, n, err
	}, func(ctx context.Context) error {
		_, err := db.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)")
		return err
	})
}

func riverMigrate[TTx any](ctx context.Context, drv riverdriver.Driver[TTx]) error {
	m, err := rivermigrate.New(drv, &rivermigrate.Config{Logger: quiet()})
	if err != nil {
		return err
	}
	_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	if err != nil {
		return fmt.Errorf("river migrate: %w", err)
	}
	return nil
}

func quiet() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func riverFill[TTx any](ctx context.Context, c *river.Client[TTx], n int) error {
	const chunk = 5000
	params := make([]river.InsertManyParams, 0, chunk)
	for done := 0; done < n; done += chunk {
		params = params[:0]
		for range min(chunk, n-done) {
			params = append(params, river.InsertManyParams{Args: noopArgs{}})
		}
		if _, err := c.InsertMany(ctx, params); err != nil {
			return fmt.Errorf("river insert: %w", err)
		}
	}
	return nil
}

func riverFillTx(ctx context.Context, c *river.Client[*sql.Tx], tx *sql.Tx, n int) error {
	const chunk = 5000
	params := make([]river.InsertManyParams, 0, chunk)
	for done := 0; done < n; done += chunk {
		params = params[:0]
		for range min(chunk, n-done) {
			params = append(params, river.InsertManyParams{Args: noopArgs{}})
		}
		if _, err := c.InsertManyTx(ctx, tx, params); err != nil {
			return fmt.Errorf("river insert: %w", err)
		}
	}
	return nil
}

func riverDrain[TTx any](ctx context.Context, drv riverdriver.Driver[TTx], r riverRun, progress io.Writer,
	fill func(context.Context, *river.Client[TTx]) error,
	first func(context.Context) (int64, int64, error),
	settle func(context.Context) error,
) (benchkit.Result, *benchkit.Tracker, error) {
	var tr *benchkit.Tracker
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{tr: func() *benchkit.Tracker { return tr }})
	c, err := river.NewClient(drv, &river.Config{
		Logger:            quiet(),
		FetchCooldown:     2 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: r.workers}},
		Workers:           workers,
	})
	if err != nil {
		return benchkit.Result{}, nil, err
	}
	if err := fill(ctx, c); err != nil {
		return benchkit.Result{}, nil, err
	}
	lo, n, err := first(ctx)
	if err != nil {
		return benchkit.Result{}, nil, err
	}
	if n != int64(r.jobs) {
		return benchkit.Result{}, nil, fmt.Errorf("river: filled %d jobs, wanted %d", n, r.jobs)
	}
	if err := settle(ctx); err != nil {
		return benchkit.Result{}, nil, err
	}
	tr = benchkit.NewTracker(lo, r.jobs)
	events, cancel := c.SubscribeConfig(&river.SubscribeConfig{Kinds: []river.EventKind{river.EventKindJobCompleted}, ChanSize: r.jobs + 1000})
	defer cancel()
	start, cpu0 := time.Now(), benchkit.MachineCPU()
	if err := c.Start(ctx); err != nil {
		return benchkit.Result{}, nil, err
	}
	done, last, lastAt := 0, 0, start
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	timeout := time.After(15 * time.Minute)
	var failed error
wait:
	for done < r.jobs {
		select {
		case <-events:
			done++
		case <-tick.C:
			now := time.Now()
			fmt.Fprintf(progress, "  %d/%d completed, %.0f jobs/s\n", done, r.jobs, float64(done-last)/now.Sub(lastAt).Seconds())
			last, lastAt = done, now
		case <-timeout:
			failed = fmt.Errorf("river drain did not finish in 15 minutes: %d/%d", done, r.jobs)
			break wait
		case <-ctx.Done():
			failed = ctx.Err()
			break wait
		}
	}
	took, cpu := time.Since(start), benchkit.MachineCPU()-cpu0
	if cpu0 < 0 {
		cpu = -1
	}
	stopCtx, stop := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer stop()
	if err := c.Stop(stopCtx); err != nil && failed == nil {
		failed = err
	}
	return benchkit.Result{Seconds: took.Seconds(), JobsPerSec: float64(r.jobs) / took.Seconds(), MachineCPU: cpu}, tr, failed
}
