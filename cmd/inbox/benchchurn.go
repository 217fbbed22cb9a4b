package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/sqlinbox/sqlinbox/claim/lease"
	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/internal/benchkit"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/notify"
)

// churnCase is what one table measured: publish to handler start, and the
// buffers an idle poll reads.
type churnCase struct {
	p50, p99       float64 // ms
	bufsPerClaim   float64 // the table's and its indexes' blocks per claim while idle
	idleClaims     int64
	firstPublishMs float64
}

// benchChurn measures a subscription on a fresh table, then on a table
// that just drained --rows rows with no vacuum since (autovacuum off for
// it): publish-to-handler latency, and the blocks an idle poll reads
// (pg_statio_user_tables, the heap and every index of the table).
func benchChurn(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench churn", flag.ContinueOnError)
	db := fs.String("db", "", "Postgres URL (required; a database no one else uses)")
	rows := fs.Int("rows", 1000000, "rows to fill and drain before the churned case")
	samples := fs.Int("samples", 200, "publishes per case")
	idle := fs.Duration("idle", 10*time.Second, "idle window per case")
	table := fs.String("table", "bench_churn", "table to (re)create")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if dbKind(*db) != "postgres" {
		return fmt.Errorf("--db: bench churn needs Postgres (SQLite leaves no dead index entries)")
	}
	setup, err := inbox.Open(*db)
	if err != nil {
		return err
	}
	defer setup.Close()
	fresh, err := churnMeasure(ctx, setup.DB(), *db, *table, 0, *samples, *idle)
	if err != nil {
		return err
	}
	churned, err := churnMeasure(ctx, setup.DB(), *db, *table, *rows, *samples, *idle)
	if err != nil {
		return err
	}
	fmt.Printf("db=postgres rows=%d samples=%d fresh_publish_p50_ms=%.3f fresh_publish_p99_ms=%.3f churned_publish_p50_ms=%.3f churned_publish_p99_ms=%.3f churned_first_publish_ms=%.3f p50_ratio=%.2f fresh_idle_buffers_per_claim=%.1f churned_idle_buffers_per_claim=%.1f idle_claims=%d\n",
		*rows, *samples, fresh.p50, fresh.p99, churned.p50, churned.p99, churned.firstPublishMs, churned.p50/fresh.p50,
		fresh.bufsPerClaim, churned.bufsPerClaim, churned.idleClaims)
	return nil
}

// churnMeasure fills the table with rows rows, drains them (2 instances x
// 100 workers), then subscribes anew and measures.
func churnMeasure(ctx context.Context, setup *sql.DB, url, table string, rows, samples int, idle time.Duration) (churnCase, error) {
	var out churnCase
	first, err := benchkit.Fill(ctx, setup, table, rows)
	if err != nil {
		return out, err
	}
	if _, err := setup.ExecContext(ctx, "ALTER TABLE "+dialect.Quote(table)+" SET (autovacuum_enabled = off)"); err != nil {
		return out, err
	}
	if rows > 0 {
		fmt.Fprintf(os.Stderr, "draining %d rows (2x100), no vacuum after\n", rows)
		tr := benchkit.NewTracker(first, rows)
		if _, err := benchkit.Drain(ctx, benchkit.Config{URL: url, Table: table, Form: lease.Form, Instances: 2, Workers: 100, Jobs: rows, Progress: os.Stderr}, tr); err != nil {
			return out, err
		}
	}
	b, err := inbox.Open(url, inbox.WithHub(notify.NewHub()))
	if err != nil {
		return out, err
	}
	defer b.Close()
	q := inbox.MustQueue[benchkit.Row](table)
	s := &starts{at: map[int64]chan time.Time{}}
	sub, err := inbox.Subscribe(b, q, s.handler, inbox.Workers(4))
	if err != nil {
		return out, err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = sub.Run(rctx) }()
	defer func() { cancel(); <-done }()
	wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
	defer wcancel()
	if err := sub.WaitIdle(wctx); err != nil {
		return out, fmt.Errorf("subscription not idle: %w", err)
	}
	var lat []time.Duration
	for i := range samples {
		t0 := time.Now()
		id, err := inbox.Publish(ctx, b, q, benchkit.Row{Payload: []byte("{}")})
		if err != nil {
			return out, err
		}
		at, err := s.wait(ctx, id)
		if err != nil {
			return out, err
		}
		lat = append(lat, at.Sub(t0))
		if i == 0 {
			out.firstPublishMs = float64(at.Sub(t0)) / float64(time.Millisecond)
		}
	}
	out.p50, out.p99 = pcts(lat)
	// The idle window: the table's blocks read, per claim sent (floor
	// reads included). A backend reports its counts at most once a second
	// while busy and within ten seconds once idle: the publishes' counts
	// land before the window opens, the window's before it is read.
	blocks := func() (int64, error) {
		var n int64
		err := setup.QueryRowContext(ctx, `SELECT coalesce(heap_blks_hit, 0) + coalesce(heap_blks_read, 0) + coalesce(idx_blks_hit, 0) + coalesce(idx_blks_read, 0)
FROM pg_statio_user_tables WHERE relname = $1`, table).Scan(&n)
		return n, err
	}
	time.Sleep(11 * time.Second)
	c0 := sub.Stats().Claims
	b0, err := blocks()
	if err != nil {
		return out, err
	}
	time.Sleep(idle)
	c1 := sub.Stats().Claims
	time.Sleep(11 * time.Second)
	b1, err := blocks()
	if err != nil {
		return out, err
	}
	c2 := sub.Stats().Claims
	out.idleClaims = c1 - c0
	out.bufsPerClaim = float64(b1-b0) / float64(max(c2-c0, 1))
	fmt.Fprintf(os.Stderr, "rows=%d: publish p50 %.3f ms p99 %.3f ms (first %.1f ms), idle: %d claims, %.1f blocks a claim\n",
		rows, out.p50, out.p99, out.firstPublishMs, c2-c0, out.bufsPerClaim)
	return out, nil
}
