package benchkit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/internal/claim"
)

// Row is the reference table's row as the benchmarks claim it.
type Row struct {
	ID          int64      `db:"id" inbox:"id,generated"`
	LockedUntil *time.Time `db:"locked_until" inbox:"locked_until"`
	Payload     []byte     `db:"payload" inbox:"payload"`
	Attempts    int        `db:"attempts" inbox:"attempts"`
}

// Config is one drain by the library.
type Config struct {
	URL       string
	Table     string
	Form      claim.Form
	Instances int // brokers, each with a pool of its own
	Workers   int // per instance
	Conns     int // pool size per instance; zero means the library's default
	Notify    bool
	Jobs      int // rows in the table, all to be acknowledged
	// Progress gets a line a second: rows done and the rate. Nil for none.
	Progress io.Writer
	// Timeout bounds the drain; zero means ten minutes.
	Timeout time.Duration
	// Registry runs each instance as an inbox.Service registered in the
	// registry (its tables must exist: migrations.ApplyRegistry), to
	// measure what the registry costs.
	Registry bool
	// Limit, when positive, drains under inbox.Limit("customer", Limit):
	// the table needs the column (see KeyRows).
	Limit int
	// RetryLock, when positive, drains as a user limits rows in work per
	// customer without Limit: each handler takes a lock of the row's
	// customer with lock.MaxHolders(RetryLock) and retries the row when it
	// is held (see subscribeRetryLock). The table needs the column (see
	// KeyRows).
	RetryLock int
	// History, if positive, keeps the acked rows for that long
	// (inbox.History); the history table must exist
	// (migrations.ApplyHistory).
	History time.Duration
	// Halfway, if set, is called once when half the rows are acknowledged,
	// with the drain running (a heap profile of its steady state).
	Halfway func()
}

// Result is what a drain measured.
type Result struct {
	Seconds    float64
	JobsPerSec float64
	Claims     int64 // claim statements sent
	Claimed    int64 // rows claimed: each an attempt
	Retried    int64 // rows handled and retried
	Refused    int64 // rows a limit refused after their claim (Stats.LimitRefused)
	// MachineCPU is the CPU seconds every core spent during the drain, all
	// processes together (see MachineCPU); -1 where it cannot be read.
	MachineCPU float64
	// DBCPU is the CPU seconds the Postgres backends of the drain's
	// database spent (see BackendCPU); -1 where it cannot be read.
	DBCPU float64
}

// DBCPUPerJob is the database's CPU per job in microseconds, or -1.
func (r Result) DBCPUPerJob(jobs int) float64 {
	if r.DBCPU < 0 || jobs <= 0 {
		return -1
	}
	return r.DBCPU * 1e6 / float64(jobs)
}

// CPUPerJob is the machine's CPU per job in microseconds, or -1.
func (r Result) CPUPerJob(jobs int) float64 {
	if r.MachineCPU < 0 || jobs <= 0 {
		return -1
	}
	return r.MachineCPU * 1e6 / float64(jobs)
}

// Drain starts cfg.Instances brokers with one subscription of cfg.Workers
// no-op handlers each, and times them until cfg.Jobs rows are acknowledged.
// Every handling is recorded in tr.
func Drain(ctx context.Context, cfg Config, tr *Tracker) (Result, error) {
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Minute
	}
	q, err := inbox.NewQueue[Row](cfg.Table)
	if err != nil {
		return Result{}, err
	}
	handler := func(_ context.Context, r Row) error {
		tr.Handle(r.ID)
		return nil
	}
	var (
		subs    []*inbox.Subscription
		runs    []func(context.Context) error
		brokers []*inbox.Broker
	)
	defer func() {
		for _, b := range brokers {
			b.Close()
		}
	}()
	for range cfg.Instances {
		var opts []inbox.Option
		if cfg.Conns > 0 {
			opts = append(opts, inbox.MaxConns(cfg.Conns))
		}
		if cfg.Notify {
			opts = append(opts, inbox.ListenNotify())
		}
		b, err := inbox.Open(cfg.URL, opts...)
		if err != nil {
			return Result{}, err
		}
		brokers = append(brokers, b)
		sopts := []inbox.SubOption{inbox.Workers(cfg.Workers), inbox.ShutdownTimeout(10 * time.Second)}
		if cfg.Form != nil {
			sopts = append(sopts, inbox.Form(cfg.Form))
		}
		if cfg.Limit > 0 {
			sopts = append(sopts, inbox.Limit("customer", cfg.Limit))
		}
		if cfg.History > 0 {
			sopts = append(sopts, inbox.History(cfg.History))
		}
		var sub *inbox.Subscription
		if cfg.RetryLock > 0 {
			var closeLocks func()
			sub, closeLocks, err = subscribeRetryLock(ctx, b, cfg, tr, sopts)
			if closeLocks != nil {
				defer closeLocks()
			}
		} else {
			sub, err = inbox.Subscribe(b, q, handler, sopts...)
		}
		if err != nil {
			return Result{}, err
		}
		subs, runs = append(subs, sub), append(runs, sub.Run)
		if cfg.Registry {
			svc := inbox.NewService("bench", "0", b)
			svc.Signals = false
			if err := svc.Register(); err != nil {
				return Result{}, err
			}
			svc.Add(sub)
			runs[len(runs)-1] = svc.Run
		}
	}
	acked := func() (n, claims int64) {
		for _, s := range subs {
			st := s.Stats()
			n += st.Acked
			claims += st.Claims
		}
		return n, claims
	}
	var db0 map[int]float64
	if len(brokers) > 0 {
		db0 = BackendCPU(ctx, brokers[0].DB())
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	errs := make([]error, len(subs))
	var wg sync.WaitGroup
	start, cpu0 := time.Now(), MachineCPU()
	for i, run := range runs {
		wg.Go(func() { errs[i] = run(runCtx) })
	}
	deadline := time.After(cfg.Timeout)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	last, lastAt := int64(0), start
	var took time.Duration
	var failed error
wait:
	for {
		select {
		case <-tick.C:
			n, _ := acked()
			if cfg.Halfway != nil && n >= int64(cfg.Jobs)/2 {
				cfg.Halfway()
				cfg.Halfway = nil
			}
			if n >= int64(cfg.Jobs) {
				took = time.Since(start)
				break wait
			}
			if cfg.Progress != nil && time.Since(lastAt) >= time.Second {
				now := time.Now()
				fmt.Fprintf(cfg.Progress, "  %d/%d acked, %.0f jobs/s\n", n, cfg.Jobs, float64(n-last)/now.Sub(lastAt).Seconds())
				last, lastAt = n, now
			}
		case <-deadline:
			took = time.Since(start)
			failed = fmt.Errorf("drain of %q did not finish within %v", cfg.Table, cfg.Timeout)
			break wait
		case <-ctx.Done():
			took = time.Since(start)
			failed = ctx.Err()
			break wait
		}
	}
	cpu := cpuSince(cpu0)
	dbCPU := -1.0
	if db0 != nil {
		dbCPU = BackendCPUSince(db0, BackendCPU(context.WithoutCancel(ctx), brokers[0].DB()))
	}
	stop()
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return Result{}, err
	}
	res := Result{Seconds: took.Seconds(), JobsPerSec: float64(cfg.Jobs) / took.Seconds(), MachineCPU: cpu, DBCPU: dbCPU}
	for _, s := range subs {
		st := s.Stats()
		res.Claims += st.Claims
		res.Claimed += st.Claimed
		res.Retried += st.Retried
		res.Refused += st.LimitRefused
	}
	return res, failed
}
