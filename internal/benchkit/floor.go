package benchkit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// LeaseSQL is the lease form's claim and ack statements on the reference
// table as Row claims it: the very text the library sends.
func LeaseSQL(d *dialect.Dialect, table string) (dialect.InboxSQL, dialect.Times) {
	t := dialect.Table{
		Name:        dialect.Quote(table),
		ID:          `"id"`,
		LockedUntil: `"locked_until"`,
		Attempts:    `"attempts"`,
		Columns:     []string{`"payload"`},
	}
	tm := dialect.Times{Kind: d.Kind, Encoding: dialect.EncodingFor(d.Kind, "DATETIME")}
	return d.Inbox(t, tm), tm
}

// Floor drains table with the lease form's own claim and ack statements in
// bare loops: each loop claims batch rows, then acks them one statement a
// row, until a claim comes back empty. No subscription, no handler
// goroutines, no settler objects: what the database alone costs.
func Floor(ctx context.Context, db *sql.DB, table string, loops, batch int, tr *Tracker) (Result, error) {
	d, err := dialect.Detect(db)
	if err != nil {
		return Result{}, err
	}
	s, _ := LeaseSQL(d, table)
	const lease = 30 * time.Second
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		errs   firstError
		claims int64
	)
	fail := errs.set
	start, cpu0 := time.Now(), MachineCPU()
	for range loops {
		wg.Go(func() {
			ids := make([]int64, 0, batch)
			var n int64
			defer func() {
				mu.Lock()
				claims += n
				mu.Unlock()
			}()
			for ctx.Err() == nil {
				now := time.Now()
				fence := now.Add(lease) // the lease the claim writes (host clock)
				claim := s.ClaimLease.Call(now, lease, batch, nil, math.MinInt64)
				rows, err := db.QueryContext(ctx, claim.SQL, claim.Args...)
				if err != nil {
					fail(fmt.Errorf("floor claim: %w", err))
					return
				}
				n++
				ids = ids[:0]
				for rows.Next() {
					var (
						id      int64
						lu      any
						att     int64
						payload []byte
					)
					if err := rows.Scan(&id, &lu, &att, &payload); err != nil {
						rows.Close()
						fail(err)
						return
					}
					ids = append(ids, id)
				}
				if err := rows.Close(); err != nil {
					fail(err)
					return
				}
				if len(ids) == 0 {
					return
				}
				for _, id := range ids {
					tr.Handle(id)
					ack := s.Ack.Call(id, fence)
					res, err := db.ExecContext(ctx, ack.SQL, ack.Args...)
					if err != nil {
						fail(fmt.Errorf("floor ack: %w", err))
						return
					}
					if k, _ := res.RowsAffected(); k != 1 {
						fail(fmt.Errorf("floor ack of row %d deleted %d rows", id, k))
						return
					}
				}
			}
		})
	}
	wg.Wait()
	took, cpu := time.Since(start), cpuSince(cpu0)
	if err := errs.get(); err != nil {
		return Result{}, err
	}
	handled := tr.Handled()
	return Result{Seconds: took.Seconds(), JobsPerSec: float64(handled) / took.Seconds(), Claims: claims, MachineCPU: cpu}, ctx.Err()
}

// TxFloor drains table the way the row-lock form's bare SQL would: loops
// goroutines, each on a connection of its own, each job a transaction that
// selects one available row FOR UPDATE SKIP LOCKED, deletes it and commits.
// Postgres only. It is the floor the row-lock and advisory forms are held
// to: one transaction per job with the same number of connections.
func TxFloor(ctx context.Context, db *sql.DB, table string, loops int, tr *Tracker) (Result, error) {
	q := dialect.Quote(table)
	sel := "SELECT id FROM " + q + " WHERE (locked_until IS NULL OR locked_until <= now()) ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED"
	del := "DELETE FROM " + q + " WHERE id = $1"
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs firstError
		txs  int64
	)
	fail := errs.set
	start, cpu0 := time.Now(), MachineCPU()
	for range loops {
		wg.Go(func() {
			var n int64
			defer func() { mu.Lock(); txs += n; mu.Unlock() }()
			for ctx.Err() == nil {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					fail(fmt.Errorf("tx floor begin: %w", err))
					return
				}
				n++
				var id int64
				err = tx.QueryRowContext(ctx, sel).Scan(&id)
				if errors.Is(err, sql.ErrNoRows) {
					tx.Rollback()
					return
				}
				if err != nil {
					tx.Rollback()
					fail(fmt.Errorf("tx floor select: %w", err))
					return
				}
				tr.Handle(id)
				if _, err := tx.ExecContext(ctx, del, id); err != nil {
					tx.Rollback()
					fail(fmt.Errorf("tx floor delete: %w", err))
					return
				}
				if err := tx.Commit(); err != nil {
					fail(fmt.Errorf("tx floor commit: %w", err))
					return
				}
			}
		})
	}
	wg.Wait()
	took, cpu := time.Since(start), cpuSince(cpu0)
	if err := errs.get(); err != nil {
		return Result{}, err
	}
	return Result{Seconds: took.Seconds(), JobsPerSec: float64(tr.Handled()) / took.Seconds(), Claims: txs, MachineCPU: cpu}, ctx.Err()
}

// firstError keeps the first error any loop reports.
type firstError struct {
	mu  sync.Mutex
	err error
}

func (f *firstError) set(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
	}
}

func (f *firstError) get() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}
