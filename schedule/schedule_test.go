package schedule_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/internal/config"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/schedule"
)

func slogTo(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func workersOf(runs []schedule.Run) []int {
	var ws []int
	for _, r := range runs {
		ws = append(ws, r.Worker)
	}
	slices.Sort(ws)
	return ws
}

func seq(from, to int) []int {
	var s []int
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return s
}

// Three instances of four workers: every moment has exactly the workers
// 0..11, each once, all agreeing on Workers and FiredAt.
func TestEveryWorkerSharesEachMoment(t *testing.T) {
	eachDatabase(t, func(t *testing.T, open opener) {
		c := newCluster(t, open)
		names := []string{"a", "b", "c"}
		for _, name := range names {
			c.start(name, 4, func(s *schedule.Scheduler) error {
				return s.Add("pack", schedule.Every(interval), schedule.EveryWorker, c.record)
			})
		}
		for k := 1; k <= 5; k++ {
			at := c.moment()
			runs := c.collect(12)
			if got := workersOf(runs); !slices.Equal(got, seq(0, 11)) {
				t.Fatalf("moment %d: workers %v, want 0..11 each once", k, got)
			}
			for _, r := range runs {
				if r.Workers != 12 || r.Instances != 3 || r.Runners != 4 || r.Schedule != "pack" {
					t.Fatalf("moment %d: run %+v, want Workers 12, Instances 3, Runners 4", k, r)
				}
				if !r.FiredAt.Equal(at) {
					t.Fatalf("moment %d: FiredAt %v, want %v", k, r.FiredAt, at)
				}
				// Instances are ordered by name, runners within them.
				if r.InstanceName != names[r.Instance] || r.Worker != r.Instance*4+r.Runner {
					t.Fatalf("moment %d: run %+v: instance index or worker out of order", k, r)
				}
			}
		}
		if extra := c.stopAll(); len(extra) > 0 {
			t.Fatalf("runs beyond the moments: %+v", extra)
		}
	})
}

// One: one run per moment; when the instance that ran the last moment stops,
// the next moment runs on another.
func TestOneRunsOncePerMomentAndMoves(t *testing.T) {
	eachDatabase(t, func(t *testing.T, open opener) {
		c := newCluster(t, open)
		spec := schedule.Cron("* * * * *", "America/New_York")
		for _, name := range []string{"a", "b", "c"} {
			c.start(name, 4, func(s *schedule.Scheduler) error {
				return s.Add("report", spec, schedule.One, c.record)
			})
		}
		var last schedule.Run
		for k := 1; k <= 8; k++ {
			at := c.moment()
			last = c.collect(1)[0]
			if !last.FiredAt.Equal(at) || last.Worker != 0 || last.Workers != 1 || last.Instances != 3 {
				t.Fatalf("moment %d: run %+v, want FiredAt %v, Worker 0 of 1, Instances 3", k, last, at)
			}
		}
		c.armed() // every instance is done with the last moment: a second run would be in by now
		select {
		case r := <-c.runs:
			t.Fatalf("a second run of a moment: %+v", r)
		default:
		}
		c.stop(last.InstanceName)
		at := c.moment()
		next := c.collect(1)[0]
		if next.InstanceName == last.InstanceName || !next.FiredAt.Equal(at) || next.Instances != 2 {
			t.Fatalf("after %s stopped: run %+v, want another instance at %v of 2", last.InstanceName, next, at)
		}
		if extra := c.stopAll(); len(extra) > 0 {
			t.Fatalf("more than one run per moment: %+v", extra)
		}
	})
}

// An instance that starts between moments is in the next moment, with its
// own worker count.
func TestJoinBetweenMoments(t *testing.T) {
	eachDatabase(t, func(t *testing.T, open opener) {
		c := newCluster(t, open)
		add := func(s *schedule.Scheduler) error {
			return s.Add("pack", schedule.Every(interval), schedule.EveryWorker, c.record)
		}
		c.start("a", 2, add)
		c.start("b", 2, add)
		c.moment()
		if got := workersOf(c.collect(4)); !slices.Equal(got, seq(0, 3)) {
			t.Fatalf("two instances: workers %v", got)
		}
		c.start("c", 3, add)
		c.moment()
		runs := c.collect(7)
		if got := workersOf(runs); !slices.Equal(got, seq(0, 6)) {
			t.Fatalf("after c joined: workers %v, want 0..6", got)
		}
		for _, r := range runs {
			if r.Workers != 7 || r.Instances != 3 {
				t.Fatalf("after c joined: run %+v, want Workers 7 of 3 instances", r)
			}
			if r.InstanceName == "c" && (r.Runners != 3 || r.Worker != 4+r.Runner) {
				t.Fatalf("c's run %+v, want workers 4..6", r)
			}
		}
		if extra := c.stopAll(); len(extra) > 0 {
			t.Fatalf("runs beyond the moments: %+v", extra)
		}
	})
}

// A handler's error or panic is logged with its share, and later moments
// still run.
func TestHandlerErrorsAndPanicsAreLogged(t *testing.T) {
	eachDatabase(t, func(t *testing.T, open opener) {
		c := newCluster(t, open)
		k := 0
		c.start("solo", 1, func(s *schedule.Scheduler) error {
			return s.Add("flaky", schedule.Every(interval), schedule.EveryInstance, func(ctx context.Context, r schedule.Run) error {
				k++ // one run at a time: the test waits for each before the next moment
				n := k
				c.runs <- r
				switch n {
				case 1:
					panic("boom")
				case 2:
					return errors.New("printer on fire")
				}
				return nil
			})
		})
		for range 3 {
			c.moment()
			c.collect(1)
		}
		c.stopAll()
		log := c.log.String()
		for _, want := range []string{
			`msg="schedule: handler panicked" schedule=flaky fired_at=2026-01-01T00:01:00.000Z worker=0 workers=1 instance=solo`,
			`panic=boom`,
			`msg="schedule: handler failed" schedule=flaky fired_at=2026-01-01T00:02:00.000Z worker=0 workers=1 instance=solo`,
			`error="printer on fire"`,
		} {
			if !strings.Contains(log, want) {
				t.Errorf("log lacks %q:\n%s", want, log)
			}
		}
	})
}

// SkipWhileBusy skips a moment while the previous run is busy; without it
// the moment runs beside the busy one.
func TestSkipWhileBusy(t *testing.T) {
	for _, skip := range []bool{true, false} {
		t.Run(fmt.Sprintf("skip=%v", skip), func(t *testing.T) {
			eachDatabase(t, func(t *testing.T, open opener) {
				c := newCluster(t, open)
				release := make(chan struct{})
				var opts []schedule.AddOption
				if skip {
					opts = append(opts, schedule.SkipWhileBusy())
				}
				first := start.Add(interval)
				c.start("solo", 1, func(s *schedule.Scheduler) error {
					return s.Add("slow", schedule.Every(interval), schedule.EveryInstance, func(ctx context.Context, r schedule.Run) error {
						c.runs <- r
						if r.FiredAt.Equal(first) {
							<-release
						}
						return nil
					}, opts...)
				})
				var once sync.Once
				free := func() { once.Do(func() { close(release) }) }
				t.Cleanup(free) // before the instance's Stop, which waits for runs
				c.moment()
				c.collect(1) // the first run is now busy
				second := c.moment()
				if !skip {
					if r := c.collect(1)[0]; !r.FiredAt.Equal(second) {
						t.Fatalf("run %+v, want the second moment beside the busy first", r)
					}
					free()
					c.stopAll()
					return
				}
				c.armed() // the second moment has been handled
				skipped := func(at time.Time) bool {
					for _, line := range strings.Split(c.log.String(), "\n") {
						if strings.Contains(line, "moment skipped") && strings.Contains(line, "fired_at="+at.Format("2006-01-02T15:04:05.000Z")) {
							return true
						}
					}
					return false
				}
				if !skipped(second) {
					t.Fatalf("the second moment was not skipped while the first was busy:\n%s", c.log)
				}
				free()
				// The first run ends a little after its release: moments may
				// still be skipped until it has; then one runs.
				for {
					at := c.moment()
					c.armed()
					if skipped(at) {
						continue // skipped, and logged so before the loop re-armed
					}
					if r := c.collect(1)[0]; !r.FiredAt.Equal(at) {
						t.Fatalf("run %+v, want the moment %v", r, at)
					}
					break
				}
				if extra := c.stopAll(); len(extra) > 0 {
					t.Fatalf("runs of skipped moments: %+v", extra)
				}
			})
		})
	}
}

// Stop deletes the heartbeats at once, cancels handlers when its context
// ends, and reports that.
func TestStopLeavesAndHonoursContext(t *testing.T) {
	eachDatabase(t, func(t *testing.T, open opener) {
		c := newCluster(t, open)
		cancelled := make(chan struct{})
		s := c.start("solo", 1, func(s *schedule.Scheduler) error {
			return s.Add("stuck", schedule.Every(interval), schedule.EveryInstance, func(ctx context.Context, r schedule.Run) error {
				c.runs <- r
				<-ctx.Done()
				close(cancelled)
				return ctx.Err()
			})
		})
		db := open(t)
		beats := func() int {
			var n int
			if err := db.QueryRow("SELECT count(*) FROM " + dialect.ScheduleHeartbeats).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		if beats() != 1 {
			t.Fatalf("heartbeats after Start: %d, want 1", beats())
		}
		c.moment()
		c.collect(1)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if err := s.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Stop with a busy handler and a short context = %v, want DeadlineExceeded", err)
		}
		select {
		case <-cancelled:
		case <-time.After(wait):
			t.Fatal("the handler's context was not cancelled")
		}
		if beats() != 0 {
			t.Fatalf("heartbeats after Stop: %d, want 0", beats())
		}
		if err := s.Start(context.Background()); err == nil {
			t.Fatal("Start after Stop accepted")
		}
	})
}

func TestBadInput(t *testing.T) {
	db, _, err := dialect.Open("sqlite://:memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	nop := func(context.Context, schedule.Run) error { return nil }

	// Every option of New refuses a value out of its bound, naming the
	// option, the value and the bound, and no scheduler is made.
	for _, tc := range []struct {
		opts []schedule.Option
		want []string
	}{
		{[]schedule.Option{schedule.Instance("")}, []string{`Instance("")`, "unique"}},
		{[]schedule.Option{schedule.DefaultWorkers(0)}, []string{"DefaultWorkers(0)", "at least 1"}},
		{[]schedule.Option{schedule.DefaultWorkers(-1)}, []string{"DefaultWorkers(-1)", "at least 1"}},
		{[]schedule.Option{schedule.WithClock(nil)}, []string{"WithClock(nil)"}},
		{[]schedule.Option{schedule.HeartbeatEvery(0)}, []string{"HeartbeatEvery(0s)", "at least 3ms"}},
		{[]schedule.Option{schedule.HeartbeatEvery(-time.Second)}, []string{"HeartbeatEvery(-1s)", "at least 3ms"}},
		{[]schedule.Option{schedule.HeartbeatEvery(time.Millisecond)}, []string{"HeartbeatEvery(1ms)", "at least 3ms"}},
		{[]schedule.Option{schedule.HeartbeatTTL(0)}, []string{"HeartbeatTTL(0s)", "more than HeartbeatEvery"}},
		{[]schedule.Option{schedule.HeartbeatTTL(time.Second)}, []string{"HeartbeatTTL(1s) must exceed HeartbeatEvery(5s)"}},
		{[]schedule.Option{schedule.HeartbeatEvery(time.Minute), schedule.HeartbeatTTL(time.Minute)}, []string{"HeartbeatTTL(1m0s) must exceed HeartbeatEvery(1m0s)"}},
		{[]schedule.Option{schedule.WithLogger(nil)}, []string{"WithLogger(nil)"}},
	} {
		s, err := schedule.New(db, tc.opts...)
		if s != nil || !errors.Is(err, schedule.ErrInvalid) || !errors.Is(err, config.ErrInvalid) {
			t.Errorf("New(%s): %v, %v; want no scheduler and an error wrapping ErrInvalid", tc.want[0], s, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("New(%s): %q does not say %q", tc.want[0], err, w)
			}
		}
	}
	if s, err := schedule.New(nil); s != nil || !errors.Is(err, schedule.ErrInvalid) {
		t.Errorf("New(nil) = %v, %v; want ErrInvalid", s, err)
	}

	s, err := schedule.New(db)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Add("ok", schedule.Every(time.Second), schedule.One, nop); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		spec      schedule.Spec
		placement schedule.Placement
		handler   schedule.Handler
		opts      []schedule.AddOption
		want      string
	}{
		{"ok", schedule.Every(time.Second), schedule.One, nop, nil, `schedule "ok" is already added`},
		{"zero", schedule.Every(0), schedule.One, nop, nil, `schedule "zero": invalid spec: interval 0s is not positive`},
		{"neg", schedule.Every(-time.Minute), schedule.One, nop, nil, `schedule "neg": invalid spec: interval -1m0s is not positive`},
		{"tiny", schedule.Every(time.Microsecond), schedule.One, nop, nil, `below a millisecond`},
		{"unset", schedule.Spec{}, schedule.One, nop, nil, `schedule "unset": invalid spec: no spec`},
		{"badcron", schedule.Cron("61 * * * *", ""), schedule.One, nop, nil, `schedule "badcron": invalid spec: cron "61 * * * *"`},
		{"fields", schedule.Cron("* *", ""), schedule.One, nop, nil, `schedule "fields": invalid spec: cron "* *"`},
		{"badzone", schedule.Cron("* * * * *", "Mars/Olympus"), schedule.One, nop, nil, `schedule "badzone": invalid spec: time zone "Mars/Olympus"`},
		{"tzprefix", schedule.Cron("CRON_TZ=UTC * * * * *", ""), schedule.One, nop, nil, `zone argument`},
		{"tznospace", schedule.Cron("TZ=UTC", ""), schedule.One, nop, nil, `zone argument`},
		{"atevery", schedule.Cron("@every 1m", ""), schedule.One, nop, nil, `use schedule.Every`},
		{"never", schedule.Cron("0 0 30 2 *", ""), schedule.One, nop, nil, `never fires`},
		{"workers", schedule.Every(time.Second), schedule.EveryWorker, nop, []schedule.AddOption{schedule.Workers(0)}, `schedule "workers": Workers(0): must be at least 1`},
		{"place", schedule.Every(time.Second), schedule.Placement(9), nop, nil, `schedule "place": unknown placement`},
		{"nohandler", schedule.Every(time.Second), schedule.One, nil, nil, `schedule "nohandler": nil handler`},
		{"", schedule.Every(time.Second), schedule.One, nop, nil, `schedule name is empty`},
	} {
		err := s.Add(tc.name, tc.spec, tc.placement, tc.handler, tc.opts...)
		if err == nil || !errors.Is(err, schedule.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Add(%q, %v) = %v, want an ErrInvalid containing %q", tc.name, tc.spec, err, tc.want)
		}
	}
}

// Start on a database without the tables says which migration is missing.
func TestStartWithoutTables(t *testing.T) {
	db, _, err := dialect.Open("sqlite://:memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s, err := schedule.New(db, schedule.Instance("x"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Add("a", schedule.Every(time.Second), schedule.One, func(context.Context, schedule.Run) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "migrations.ApplySchedules") {
		t.Fatalf("Start without tables = %v, want a hint to migrations.ApplySchedules", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s2, _ := schedule.New(db)
	_ = s2.Add("a", schedule.Every(time.Second), schedule.One, func(context.Context, schedule.Run) error { return nil })
	if err := s2.Start(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Start with a cancelled context = %v, want context.Canceled", err)
	}
}

func TestRunOwns(t *testing.T) {
	r := schedule.Run{Worker: 2, Workers: 3}
	var got []int64
	for n := int64(-4); n <= 8; n++ {
		if r.Owns(n) {
			got = append(got, n)
		}
	}
	if !slices.Equal(got, []int64{-4, -1, 2, 5, 8}) {
		t.Fatalf("Owns picked %v", got)
	}
}

// With the database's clock, heartbeats are written and compared with the
// engine's now(): two instances on the host's timers still share moments.
func TestDatabaseClock(t *testing.T) {
	eachDatabase(t, func(t *testing.T, open opener) {
		runs := make(chan schedule.Run, 1000)
		for _, name := range []string{"a", "b"} {
			s, err := schedule.New(open(t), schedule.Instance(name), schedule.WithClock(clock.Database{}), schedule.HeartbeatEvery(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Add("tick", schedule.Every(100*time.Millisecond), schedule.EveryInstance, func(_ context.Context, r schedule.Run) error {
				runs <- r
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if err := s.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Stop(context.Background()) })
		}
		byMoment := map[time.Time][]schedule.Run{}
		deadline := time.After(wait)
		for {
			select {
			case r := <-runs:
				if r.FiredAt.Truncate(100*time.Millisecond) != r.FiredAt {
					t.Fatalf("FiredAt %v is not on the interval", r.FiredAt)
				}
				m := append(byMoment[r.FiredAt], r)
				byMoment[r.FiredAt] = m
				if len(m) == 2 {
					if m[0].Instances != 2 || m[0].Worker == m[1].Worker || m[0].Workers != 2 {
						t.Fatalf("a moment's runs disagree: %+v", m)
					}
					return
				}
			case <-deadline:
				t.Fatalf("no moment ran on both instances: %v", byMoment)
			}
		}
	})
}
