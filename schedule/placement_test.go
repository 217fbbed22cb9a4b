package schedule_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/sqlinbox/sqlinbox/migrations"
	"github.com/sqlinbox/sqlinbox/schedule"
)

// A schedule its code places on one instance, switched by an operator to
// every instance, runs on both instances from the next moment on; reset,
// it runs on one again. The schedules' status shows the override while it
// is set.
func TestPlacementOverride(t *testing.T) {
	eachDatabase(t, func(t *testing.T, open opener) {
		ctx := context.Background()
		db := open(t)
		if err := migrations.ApplyRegistry(ctx, db); err != nil {
			t.Fatal(err)
		}
		c := newCluster(t, open)
		for _, name := range []string{"a", "b"} {
			c.start(name, 2, func(s *schedule.Scheduler) error {
				return s.Add("report", schedule.Every(interval), schedule.One, c.record)
			})
		}
		// ranOn runs one moment and returns the instances that ran it,
		// sure that no other run of it comes (every instance re-armed).
		ranOn := func(want int) []string {
			t.Helper()
			at := c.moment()
			var names []string
			for _, r := range c.collect(want) {
				if !r.FiredAt.Equal(at) || r.Workers != want {
					t.Fatalf("run %+v, want FiredAt %v and %d shares", r, at, want)
				}
				names = append(names, r.InstanceName)
			}
			c.armed()
			select {
			case r := <-c.runs:
				t.Fatalf("a run more than the %d wanted at %v: %+v", want, at, r)
			default:
			}
			slices.Sort(names)
			return names
		}
		if got := ranOn(1); len(got) != 1 {
			t.Fatalf("before the override: ran on %v, want one instance", got)
		}
		if err := schedule.SetPlacement(ctx, db, "report", schedule.EveryInstance); err != nil {
			t.Fatal(err)
		}
		st, err := schedule.Inspect(ctx, db, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Schedules) != 1 || st.Schedules[0].Override == nil || st.Schedules[0].Override.Placement != schedule.EveryInstance || st.Schedules[0].Placement != "one" {
			t.Fatalf("status after the override: %+v, want the code's one and the override every-instance", st.Schedules)
		}
		for range 2 {
			if got := ranOn(2); !slices.Equal(got, []string{"a", "b"}) {
				t.Fatalf("after the override to every instance: ran on %v, want a and b", got)
			}
		}
		if had, err := schedule.ResetPlacement(ctx, db, "report"); err != nil || !had {
			t.Fatalf("reset: %v, %v; want the override found and removed", had, err)
		}
		if got := ranOn(1); len(got) != 1 {
			t.Fatalf("after the reset: ran on %v, want one instance", got)
		}
		if st, err = schedule.Inspect(ctx, db, 10); err != nil || st.Schedules[0].Override != nil {
			t.Fatalf("status after the reset: %+v, %v; want no override", st.Schedules, err)
		}
		if extra := c.stopAll(); len(extra) > 0 {
			t.Fatalf("runs after the last moment: %+v", extra)
		}
	})
}

// A placement that is none of the three is refused by name.
func TestParsePlacement(t *testing.T) {
	for _, p := range []schedule.Placement{schedule.One, schedule.EveryInstance, schedule.EveryWorker} {
		if got, err := schedule.ParsePlacement(p.String()); err != nil || got != p {
			t.Errorf("ParsePlacement(%q) = %v, %v", p, got, err)
		}
	}
	if _, err := schedule.ParsePlacement("everywhere"); !errors.Is(err, schedule.ErrInvalid) {
		t.Errorf("ParsePlacement(everywhere): %v, want ErrInvalid", err)
	}
}
