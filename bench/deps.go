package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/internal/benchkit"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// depsRun measures dependencies on Postgres, in one run: drains of the
// same rows without a table of edges and with one present but unused
// (inbox.After never called), taking turns, then a chain of steps, each
// published by its parent's HandleTx handler with inbox.After(parent).
type depsRun struct {
	pg        string
	jobs      int
	instances int
	workers   int
	rounds    int
	steps     int
}

// depsRow is one drain.
type depsRow struct {
	way string // "without", "with"
	res benchkit.Result
	bad int64 // lost + duplicated
}

func (dr depsRun) run(ctx context.Context) ([]depsRow, float64, error) {
	db, _, err := dialect.Open(dr.pg)
	if err != nil {
		return nil, 0, err
	}
	defer db.Close()
	const table = "bench_deps_jobs"
	var out []depsRow
	for round := range dr.rounds {
		ways := []string{"without", "with"}
		if round%2 == 1 {
			ways = []string{"with", "without"}
		}
		for _, way := range ways {
			first, err := benchkit.Fill(ctx, db, table, dr.jobs)
			if err != nil {
				return nil, 0, err
			}
			if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+table+"_deps"); err != nil {
				return nil, 0, err
			}
			if way == "with" {
				if err := migrations.ApplyDependencies(ctx, db, table, "id"); err != nil {
					return nil, 0, err
				}
			}
			tr := benchkit.NewTracker(first, dr.jobs)
			fmt.Fprintf(os.Stderr, "round %d: %s edges, %d rows, %dx%d\n", round+1, way, dr.jobs, dr.instances, dr.workers)
			res, err := benchkit.Drain(ctx, benchkit.Config{URL: dr.pg, Table: table, Instances: dr.instances, Workers: dr.workers, Jobs: dr.jobs, Progress: os.Stderr}, tr)
			if err != nil {
				return nil, 0, fmt.Errorf("drain %s edges: %w", way, err)
			}
			out = append(out, depsRow{way: way, res: res, bad: tr.Lost() + tr.Duplicates()})
		}
	}
	rate := 0.0
	if dr.steps > 0 {
		if rate, err = chain(ctx, db, dr.pg, dr.steps); err != nil {
			return nil, 0, err
		}
	}
	return out, rate, nil
}

// step is a row of the chain's table.
type step struct {
	ID          int64      `db:"id" inbox:"id,generated"`
	LockedUntil *time.Time `db:"locked_until" inbox:"locked_until"`
	Payload     []byte     `db:"payload" inbox:"payload"`
	Attempts    int        `db:"attempts" inbox:"attempts"`
}

// chain runs steps steps one after the other: each step's HandleTx
// handler publishes the next with inbox.After(itself) in its transaction,
// so each hand-off is an ack, a release and a claim. It returns steps/s.
func chain(ctx context.Context, db *sql.DB, url string, steps int) (float64, error) {
	const table = "bench_chain_jobs"
	if _, err := benchkit.Fill(ctx, db, table, 0); err != nil {
		return 0, err
	}
	if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+table+"_deps"); err != nil {
		return 0, err
	}
	if err := migrations.ApplyDependencies(ctx, db, table, "id"); err != nil {
		return 0, err
	}
	b, err := inbox.Open(url)
	if err != nil {
		return 0, err
	}
	defer b.Close()
	q, err := inbox.NewQueue[step](table)
	if err != nil {
		return 0, err
	}
	done := make(chan struct{})
	var n atomic.Int64
	sub, err := inbox.SubscribeTx(b, q, func(ctx context.Context, tx *sql.Tx, s step) error {
		if n.Add(1) == int64(steps) {
			close(done)
			return nil
		}
		_, err := inbox.PublishTx(ctx, b, tx, q, step{Payload: []byte("step")}, inbox.After(s.ID))
		return err
	}, inbox.Workers(1))
	if err != nil {
		return 0, err
	}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	go sub.Run(rctx)
	if _, err := inbox.Publish(ctx, b, q, step{Payload: []byte("step")}); err != nil {
		return 0, err
	}
	start := time.Now()
	select {
	case <-done:
	case <-time.After(10 * time.Minute):
		return 0, fmt.Errorf("chain: %d of %d steps in 10 minutes", n.Load(), steps)
	}
	took := time.Since(start)
	fmt.Fprintf(os.Stderr, "chain: %d steps in %v\n", steps, took.Round(time.Millisecond))
	return float64(steps) / took.Seconds(), nil
}

// depsReport prints each drain with its ratio to the drain without edges
// of its round, and the chain's rate.
func depsReport(rows []depsRow, jobs int, chainRate float64, steps int) {
	fmt.Println("way\tjobs/s\tvs without\tclaims/1k jobs\tdb cpu us/job\tcpu us/job\tlost+dup")
	for i, r := range rows {
		other := rows[i^1]
		without := r.res.JobsPerSec
		if r.way == "with" {
			without = other.res.JobsPerSec
		}
		fmt.Printf("%s\t%.0f\t%.2fx\t%.1f\t%.1f\t%.1f\t%d\n", r.way, r.res.JobsPerSec, r.res.JobsPerSec/without,
			float64(r.res.Claims)*1000/float64(jobs), r.res.DBCPUPerJob(jobs), r.res.CPUPerJob(jobs), r.bad)
	}
	if steps > 0 {
		fmt.Printf("chain of %d steps (HandleTx, each publishing the next with After): %.0f steps/s\n", steps, chainRate)
	}
}
