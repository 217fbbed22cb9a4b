package benchkit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// Floor drains table the way a user of bare SQL would write a batch worker:
// loops goroutines, each repeating one transaction a batch that selects
// the first batch rows in id order, locked (Postgres and MySQL: FOR UPDATE
// SKIP LOCKED; SQLite: BEGIN IMMEDIATE), handles each, deletes them in one
// statement and commits, until a select comes back empty. No lease, no
// handler goroutines, no group commit: one commit a batch, what the
// database alone costs. It walks the key from the table's start every
// time, as such a loop does: the index entries of rows deleted before are
// skipped cheaply once a scan has marked them dead (EXPLAIN (ANALYZE,
// BUFFERS) after 100,000 of 200,000 rows deleted: 279 index buffers, 0.3
// ms), so the walk stays cheap for a backlog of this size.
func Floor(ctx context.Context, db *sql.DB, table string, loops, batch int, tr *Tracker) (Result, error) {
	d, err := dialect.Detect(db)
	if err != nil {
		return Result{}, err
	}
	q := d.Quote(table)
	sel := "SELECT id, payload FROM " + q + " ORDER BY id LIMIT " + strconv.Itoa(batch)
	if d.Kind != dialect.SQLite {
		sel += " FOR UPDATE SKIP LOCKED"
	}
	del := func(ids []int64) (string, []any) {
		if d.Kind == dialect.Postgres {
			return "DELETE FROM " + q + " WHERE id = ANY($1)", []any{ids}
		}
		var b strings.Builder
		args := make([]any, len(ids))
		b.WriteString("DELETE FROM " + q + " WHERE id IN (")
		for i, id := range ids {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteByte('?')
			args[i] = id
		}
		b.WriteByte(')')
		return b.String(), args
	}
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
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					fail(fmt.Errorf("floor begin: %w", err))
					return
				}
				n++
				more, err := floorBatch(ctx, tx, sel, del, ids[:0], tr)
				if err != nil {
					tx.Rollback()
					fail(err)
					return
				}
				if !more {
					tx.Rollback()
					return
				}
				if err := tx.Commit(); err != nil {
					fail(fmt.Errorf("floor commit: %w", err))
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
	handled := tr.Handled()
	return Result{Seconds: took.Seconds(), JobsPerSec: float64(handled) / took.Seconds(), Claims: claims, MachineCPU: cpu}, ctx.Err()
}

// floorBatch is one transaction of Floor less its commit: it selects and
// locks a batch, handles each row and deletes them all. It reports false
// when the select found nothing.
func floorBatch(ctx context.Context, tx *sql.Tx, sel string, del func([]int64) (string, []any), ids []int64, tr *Tracker) (bool, error) {
	rows, err := tx.QueryContext(ctx, sel)
	if err != nil {
		return false, fmt.Errorf("floor select: %w", err)
	}
	for rows.Next() {
		var (
			id      int64
			payload []byte
		)
		if err := rows.Scan(&id, &payload); err != nil {
			rows.Close()
			return false, fmt.Errorf("floor select: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Close(); err != nil {
		return false, fmt.Errorf("floor select: %w", err)
	}
	if len(ids) == 0 {
		return false, nil
	}
	for _, id := range ids {
		tr.Handle(id)
	}
	stmt, args := del(ids)
	res, err := tx.ExecContext(ctx, stmt, args...)
	if err != nil {
		return false, fmt.Errorf("floor delete: %w", err)
	}
	if k, _ := res.RowsAffected(); k != int64(len(ids)) {
		return false, fmt.Errorf("floor delete of %d rows deleted %d", len(ids), k)
	}
	return true, nil
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
