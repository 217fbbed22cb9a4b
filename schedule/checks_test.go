package schedule_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/schedule"
)

// Workers(n) means runs per instance of an EveryWorker schedule: on the
// other placements it would be silently ignored, so Add refuses it. Zone
// "Local" would read the host's zone, which the schedule never uses.
func TestAddRefusesMeaninglessOptions(t *testing.T) {
	eachDatabase(t, func(t *testing.T, open opener) {
		s, err := schedule.New(open(t), schedule.Instance("x"))
		if err != nil {
			t.Fatal(err)
		}
		nop := func(context.Context, schedule.Run) error { return nil }
		for _, tc := range []struct {
			name      string
			spec      schedule.Spec
			placement schedule.Placement
			opts      []schedule.AddOption
			want      string
		}{
			{"one", schedule.Every(time.Second), schedule.One, []schedule.AddOption{schedule.Workers(3)}, `schedule "one": Workers(3) is for EveryWorker schedules; a One schedule has one run a moment`},
			{"inst", schedule.Every(time.Second), schedule.EveryInstance, []schedule.AddOption{schedule.Workers(2)}, `schedule "inst": Workers(2) is for EveryWorker schedules; an EveryInstance schedule has one run per instance`},
			{"local", schedule.Cron("* * * * *", "Local"), schedule.One, nil, `schedule "local": invalid spec: time zone "Local" is the host's zone`},
		} {
			err := s.Add(tc.name, tc.spec, tc.placement, nop, tc.opts...)
			if err == nil || !errors.Is(err, schedule.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Add(%q) = %v, want an ErrInvalid containing %q", tc.name, err, tc.want)
			}
		}
		if err := s.Add("worker", schedule.Every(time.Second), schedule.EveryWorker, nop, schedule.Workers(3)); err != nil {
			t.Errorf("Workers(3) on EveryWorker: %v", err)
		}
	})
}

// A cron read in a zone fires at moments of that zone, and FiredAt says so.
func TestCronFiredAtInItsZone(t *testing.T) {
	eachDatabase(t, func(t *testing.T, open opener) {
		c := newCluster(t, open)
		c.start("a", 1, func(s *schedule.Scheduler) error {
			if err := s.Add("ny", schedule.Cron("* * * * *", "America/New_York"), schedule.One, c.record); err != nil {
				return err
			}
			return s.Add("utc", schedule.Cron("* * * * *", ""), schedule.One, c.record)
		})
		c.timers++ // a second schedule
		at := c.moment()
		for _, r := range c.collect(2) {
			want := map[string]string{"ny": "America/New_York", "utc": "UTC"}[r.Schedule]
			if got := r.FiredAt.Location().String(); got != want || !r.FiredAt.Equal(at) {
				t.Errorf("schedule %s: FiredAt %v in %s, want %v in %s", r.Schedule, r.FiredAt, got, at, want)
			}
		}
		c.stopAll()
	})
}

// Two schedulers that share an instance name would share its heartbeats and
// its shares. A second Start under a live scheduler's name waits until that
// one renews its hold, then fails; under the name of one that crashed, it
// waits for the dead one's hold to expire and starts (a restart).
func TestDuplicateInstanceName(t *testing.T) {
	eachDatabase(t, func(t *testing.T, open opener) {
		c := newCluster(t, open)
		add := func(s *schedule.Scheduler) error {
			return s.Add("pack", schedule.Every(interval), schedule.EveryWorker, c.record)
		}
		c.start("a", 1, add)
		// twin starts another "a" and drives the clock, a third of a
		// heartbeat at a time once every timer is armed, until Start returns.
		twin := func() (*schedule.Scheduler, error) {
			s, err := schedule.New(open(t), schedule.Instance("a"), schedule.WithClock(c.clk), schedule.HeartbeatEvery(beat), schedule.HeartbeatTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Add("pack", schedule.Every(interval), schedule.EveryWorker, c.record); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- s.Start(context.Background()) }()
			for steps := 0; ; steps++ {
				select {
				case err := <-done:
					return s, err
				default:
				}
				if steps > 100 {
					t.Fatal("Start under a held name never returned")
				}
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				err := c.clk.WaitTimers(ctx, c.timers+1) // the live ones', and the waiting Start's
				cancel()
				if err == nil {
					c.clk.Advance(beat / 3)
				}
			}
		}
		_, err := twin()
		if !errors.Is(err, schedule.ErrDuplicateInstance) || !strings.Contains(err.Error(), `instance "a"`) {
			t.Fatalf("second Start with the name of a live instance = %v, want ErrDuplicateInstance naming it", err)
		}
		c.stop("a")
		s, err := twin()
		if err != nil {
			t.Fatalf("Start after the first stopped: %v", err)
		}
		schedule.Crash(s)
		s, err = twin()
		if err != nil {
			t.Fatalf("Start after a crash under the same name: %v", err)
		}
		s.Stop(context.Background())
	})
}
