package schedule_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/migrations"
	"github.com/sqlinbox/sqlinbox/schedule"

	_ "modernc.org/sqlite"
)

// Two instances of two workers each share ten orders every ten seconds: each run
// packs the orders whose number modulo Workers is its Worker, so every order
// is packed once per moment. A fake clock drives the moments here; a service
// leaves out WithClock and runs on the host's clock.
func Example_everyWorker() {
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	// One SQLite database in memory, shared by the pools of this process.
	const dsn = "file:/example_every_worker?vfs=memdb&_txlock=immediate&_pragma=busy_timeout(10000)"

	var mu sync.Mutex
	var lines []string
	var done sync.WaitGroup
	done.Add(4) // four runs in the first moment
	pack := func(ctx context.Context, r schedule.Run) error {
		defer done.Done()
		var mine []int64
		for order := int64(1); order <= 10; order++ {
			if r.Owns(order) {
				mine = append(mine, order)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, fmt.Sprintf("%s worker %d of %d (%s runner %d of %d): orders %v",
			r.FiredAt.Format("15:04:05"), r.Worker, r.Workers, r.InstanceName, r.Runner, r.Runners, mine))
		return nil
	}

	var instances []*schedule.Scheduler
	for _, name := range []string{"blue", "green"} {
		db, err := sql.Open("sqlite", dsn) // each instance has its own pool
		if err != nil {
			panic(err)
		}
		defer db.Close()
		if err := migrations.ApplySchedules(ctx, db); err != nil {
			panic(err)
		}
		s, err := schedule.New(db, schedule.Instance(name), schedule.DefaultWorkers(2), schedule.WithClock(clk))
		if err != nil {
			panic(err)
		}
		if err := s.Add("pack_orders", schedule.Every(10*time.Second), schedule.EveryWorker, pack); err != nil {
			panic(err)
		}
		if err := s.Start(ctx); err != nil {
			panic(err)
		}
		defer s.Stop(ctx)
		instances = append(instances, s)
	}

	// Each instance arms four timers (heartbeat, sweep for shares to take
	// over, renewal of running shares' leases, and the moment); then the
	// clock moves to the first moment, within the heartbeats' lifetime
	// (DefaultHeartbeatTTL), as a real clock would.
	if err := clk.WaitTimers(ctx, 4*len(instances)); err != nil {
		panic(err)
	}
	clk.Advance(10 * time.Second)
	done.Wait()

	slices.Sort(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// 00:00:10 worker 0 of 4 (blue runner 0 of 2): orders [4 8]
	// 00:00:10 worker 1 of 4 (blue runner 1 of 2): orders [1 5 9]
	// 00:00:10 worker 2 of 4 (green runner 0 of 2): orders [2 6 10]
	// 00:00:10 worker 3 of 4 (green runner 1 of 2): orders [3 7]
}

// A nightly report runs on one instance at 02:00. The service is down from
// the first night's run until the morning of the fourth day: when it starts
// again, CatchUp runs the three nights it missed, each once, with its own
// FiredAt. Without the option they would be skipped.
func Example_catchUp() {
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 1, 1, 1, 59, 50, 0, time.UTC))
	db, err := sql.Open("sqlite", "file:/example_catch_up?vfs=memdb&_txlock=immediate&_pragma=busy_timeout(10000)")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	if err := migrations.ApplySchedules(ctx, db); err != nil {
		panic(err)
	}

	var mu sync.Mutex
	var lines []string
	var done sync.WaitGroup
	report := func(ctx context.Context, r schedule.Run) error {
		defer done.Done()
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, "report of the night of "+r.FiredAt.Format("Jan 2 15:04"))
		return nil
	}
	start := func() *schedule.Scheduler {
		s, err := schedule.New(db, schedule.Instance("reports"), schedule.WithClock(clk))
		if err != nil {
			panic(err)
		}
		err = s.Add("nightly_report", schedule.Cron("0 2 * * *", ""), schedule.One, report,
			schedule.CatchUp(72*time.Hour, 7)) // the last three days, at most seven moments
		if err != nil {
			panic(err)
		}
		if err := s.Start(ctx); err != nil {
			panic(err)
		}
		return s
	}

	s := start()
	done.Add(1)
	if err := clk.WaitTimers(ctx, 4); err != nil {
		panic(err)
	}
	clk.Advance(10 * time.Second) // 02:00 on the first night
	done.Wait()
	if err := s.Stop(ctx); err != nil {
		panic(err)
	}

	clk.Set(time.Date(2026, 1, 4, 9, 0, 0, 0, time.UTC)) // down until the fourth morning
	done.Add(3)
	s = start()
	defer s.Stop(ctx)
	done.Wait()

	slices.Sort(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// report of the night of Jan 1 02:00
	// report of the night of Jan 2 02:00
	// report of the night of Jan 3 02:00
	// report of the night of Jan 4 02:00
}
