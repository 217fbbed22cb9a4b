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
	bufsPerSec     float64 // the same per second: per poll of a parked group (one a poll interval)
	idleClaims     int64
	firstPublishMs float64
}

// benchChurn measures a subscription on a fresh table, then on a table
// that just drained --rows rows with no vacuum since (autovacuum off for
// it): publish-to-handler latency, and the blocks an idle poll reads
// (pg_statio_user_tables, the heap and every index of the table). With
// --group the rows and the subscription are of one group, so the idle
// subscription parks with its table's poller, which probes the group from
// the claimer's floor; --hooks runs it in a service with Hooks installed, as
// inboxotel.Instrument installs them.
func benchChurn(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench churn", flag.ContinueOnError)
	db := fs.String("db", "", "Postgres URL (required; a database no one else uses)")
	rows := fs.Int("rows", 1000000, "rows to fill and drain before the churned case")
	samples := fs.Int("samples", 200, "publishes per case")
	idle := fs.Duration("idle", 10*time.Second, "idle window per case")
	table := fs.String("table", "bench_churn", "table to (re)create")
	var o churnOpts
	fs.StringVar(&o.group, "group", "", "fill, drain and subscribe to this group of the table (the idle poll is then the table's group poller)")
	fs.BoolVar(&o.analyze, "analyze", false, "ANALYZE the table after the drain, as autovacuum's analyze would (no vacuum still): with the fill's statistics the planner reads the idle group poll as a sequential scan, floor or none")
	fs.BoolVar(&o.hooks, "hooks", false, "run the subscription in a service with Hooks (Claimed, Started, Handled) installed, as inboxotel.Instrument does")
	if err := parseFlags(ctx, fs, args); err != nil {
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
	fresh, err := churnMeasure(ctx, setup.DB(), *db, *table, 0, *samples, *idle, o)
	if err != nil {
		return err
	}
	churned, err := churnMeasure(ctx, setup.DB(), *db, *table, *rows, *samples, *idle, o)
	if err != nil {
		return err
	}
	fmt.Printf("db=postgres rows=%d group=%q hooks=%t analyze=%t samples=%d fresh_publish_p50_ms=%.3f fresh_publish_p99_ms=%.3f churned_publish_p50_ms=%.3f churned_publish_p99_ms=%.3f churned_first_publish_ms=%.3f p50_ratio=%.2f fresh_idle_buffers_per_claim=%.1f churned_idle_buffers_per_claim=%.1f idle_claims=%d fresh_idle_buffers_per_s=%.1f churned_idle_buffers_per_s=%.1f\n",
		*rows, o.group, o.hooks, o.analyze, *samples, fresh.p50, fresh.p99, churned.p50, churned.p99, churned.firstPublishMs, churned.p50/fresh.p50,
		fresh.bufsPerClaim, churned.bufsPerClaim, churned.idleClaims, fresh.bufsPerSec, churned.bufsPerSec)
	return nil
}

// churnOpts are bench churn's --group, --hooks and --analyze.
type churnOpts struct {
	group   string
	hooks   bool
	analyze bool
}

// churnMeasure fills the table with rows rows, drains them (2 instances x
// 100 workers), then subscribes anew and measures.
func churnMeasure(ctx context.Context, setup *sql.DB, url, table string, rows, samples int, idle time.Duration, o churnOpts) (churnCase, error) {
	var out churnCase
	first, err := churnFill(ctx, setup, table, rows, o.group)
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
		if o.analyze {
			if _, err := setup.ExecContext(ctx, "ANALYZE "+dialect.Quote(table)); err != nil {
				return out, err
			}
		}
	}
	b, err := inbox.Open(url, inbox.WithHub(notify.NewHub()))
	if err != nil {
		return out, err
	}
	defer b.Close()
	s := &starts{at: map[int64]chan time.Time{}}
	svc := inbox.NewService("bench-churn", "", b)
	svc.Signals = false
	var publish func() (int64, error)
	if o.group != "" {
		q := inbox.MustQueue[groupRow](table).Group(o.group)
		_, err = inbox.Handle(svc, q, func(ctx context.Context, r groupRow) error { return s.handler(ctx, benchkit.Row{ID: r.ID}) }, inbox.Workers(4))
		publish = func() (int64, error) { return inbox.Publish(ctx, b, q, groupRow{Payload: []byte("{}")}) }
	} else {
		q := inbox.MustQueue[benchkit.Row](table)
		_, err = inbox.Handle(svc, q, s.handler, inbox.Workers(4))
		publish = func() (int64, error) { return inbox.Publish(ctx, b, q, benchkit.Row{Payload: []byte("{}")}) }
	}
	if err != nil {
		return out, err
	}
	if o.hooks {
		svc.AddHooks(inbox.Hooks{
			Handled: func(*inbox.Subscription, inbox.Event) {},
			Claimed: func(*inbox.Subscription, inbox.ClaimEvent) {},
			Started: func(_ *inbox.Subscription, ctx context.Context, _ inbox.StartEvent) context.Context { return ctx },
		})
	}
	sub := svc.Subscriptions()[0]
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = svc.Run(rctx) }()
	defer func() { cancel(); <-done }()
	wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
	defer wcancel()
	select {
	case <-svc.Started():
	case <-wctx.Done():
		return out, fmt.Errorf("service not started: %w", wctx.Err())
	}
	if err := sub.WaitIdle(wctx); err != nil {
		return out, fmt.Errorf("subscription not idle: %w", err)
	}
	var lat []time.Duration
	for i := range samples {
		t0 := time.Now()
		id, err := publish()
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
	return out, churnIdle(ctx, setup, table, sub, idle, &out)
}

// churnIdle measures the idle window: the table's blocks read, per claim
// sent (floor reads included) and per second. A backend reports its counts
// at most once a second while busy and within ten seconds once idle: the
// publishes' counts land before the window opens, the window's before it
// is read.
func churnIdle(ctx context.Context, setup *sql.DB, table string, sub *inbox.Subscription, idle time.Duration, out *churnCase) error {
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
		return err
	}
	t0 := time.Now()
	time.Sleep(idle)
	c1 := sub.Stats().Claims
	window := time.Since(t0)
	time.Sleep(11 * time.Second)
	b1, err := blocks()
	if err != nil {
		return err
	}
	c2 := sub.Stats().Claims
	out.idleClaims = c1 - c0
	out.bufsPerClaim = float64(b1-b0) / float64(max(c2-c0, 1))
	// The window's polls are counted over the window and the 11s after it.
	out.bufsPerSec = float64(b1-b0) / (window + 11*time.Second).Seconds()
	fmt.Fprintf(os.Stderr, "idle: %d claims, %.1f blocks a claim, %.1f blocks a second\n", c2-c0, out.bufsPerClaim, out.bufsPerSec)
	fmt.Fprintf(os.Stderr, "publish p50 %.3f ms p99 %.3f ms (first %.1f ms)\n", out.p50, out.p99, out.firstPublishMs)
	return nil
}

// churnFill is benchkit.Fill, with the rows in group when one is given.
func churnFill(ctx context.Context, db *sql.DB, table string, rows int, group string) (int64, error) {
	if group == "" {
		return benchkit.Fill(ctx, db, table, rows)
	}
	if _, err := benchkit.Fill(ctx, db, table, 0); err != nil {
		return 0, err
	}
	q := dialect.Quote(table)
	if _, err := db.ExecContext(ctx, "INSERT INTO "+q+" (group_name, payload) SELECT $1, '\\x7b7d'::bytea FROM generate_series(1, $2)", group, rows); err != nil {
		return 0, fmt.Errorf("fill %s with %d rows of group %q: %w", table, rows, group, err)
	}
	if _, err := db.ExecContext(ctx, "VACUUM ANALYZE "+q); err != nil {
		return 0, fmt.Errorf("fill %s: vacuum: %w", table, err)
	}
	var first sql.NullInt64
	err := db.QueryRowContext(ctx, "SELECT min(id) FROM "+q).Scan(&first)
	return first.Int64, err
}
