package schedule_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/schedule"
)

// An instance that dies keeps its place in the membership until its
// heartbeat expires, but its shares are not lost: their leases run out and
// the living take them over, so every moment still runs every worker once;
// then the others re-share.
func TestDeadInstanceSharesTakenOver(t *testing.T) {
	eachDatabase(t, func(t *testing.T, open opener) {
		c := newCluster(t, open)
		for _, name := range []string{"a", "b", "c"} {
			c.start(name, 4, func(s *schedule.Scheduler) error {
				return s.Add("pack", schedule.Every(interval), schedule.EveryWorker, c.record)
			})
		}
		c.moment()
		c.collect(12)
		c.crash("b")
		var moments []time.Time
		for range 10 {
			moments = append(moments, c.moment())
		}
		c.armed()
		byMoment := map[time.Time][]schedule.Run{}
		for _, r := range c.stopAll() {
			byMoment[r.FiredAt] = append(byMoment[r.FiredAt], r)
		}
		takenOver, shrunk := 0, false
		// The last moments' shares dealt to b were still reserved for it.
		for k, at := range moments[:len(moments)-3] {
			runs := byMoment[at]
			if len(runs) == 0 {
				t.Fatalf("moment %d after the crash: no runs", k)
			}
			n := runs[0].Workers
			if got := workersOf(runs); !slices.Equal(got, seq(0, n-1)) {
				t.Fatalf("moment %d after the crash: workers %v of %d, want each once: %+v\n%s", k, got, n, runs, c.log)
			}
			for _, r := range runs {
				switch {
				case r.InstanceName == "b":
					t.Fatalf("a run on the dead instance: %+v", r)
				case n == 12 && r.Worker >= 4 && r.Worker < 8:
					if r.DealtTo != "b" || r.Instance != 1 || r.Runner != r.Worker-4 || r.Runners != 4 || r.Instances != 3 {
						t.Fatalf("moment %d: b's share run as %+v, want dealt to b, instance 1, runner %d of 4", k, r, r.Worker-4)
					}
					takenOver++
				case r.DealtTo != r.InstanceName:
					t.Fatalf("moment %d: %+v taken over from a live instance", k, r)
				}
			}
			if n == 8 {
				shrunk = true
			} else if shrunk {
				t.Fatalf("moment %d: b back in the membership after it left", k)
			}
		}
		if takenOver == 0 || !shrunk {
			t.Fatalf("%d shares of b taken over; membership shrank: %v", takenOver, shrunk)
		}
		t.Logf("%d shares of b taken over before it left the membership", takenOver)
	})
}

// With One, the instance that won the moment dies while its run is busy:
// the run's lease runs out and another instance runs the moment's share,
// as dealt to the dead one; a later moment runs once as usual.
func TestOneShareTakenOverWhenItsRunnerDies(t *testing.T) {
	eachDatabase(t, func(t *testing.T, open opener) {
		c := newCluster(t, open)
		for _, name := range []string{"a", "b"} {
			c.start(name, 1, func(s *schedule.Scheduler) error {
				return s.Add("report", schedule.Every(interval), schedule.One, func(ctx context.Context, r schedule.Run) error {
					c.runs <- r
					if r.DealtTo == r.InstanceName && r.FiredAt.Equal(start.Add(interval)) {
						<-ctx.Done() // the first moment's winner is busy until it dies
					}
					return nil
				})
			})
		}
		at := c.moment()
		first := c.collect(1)[0]
		c.crash(first.InstanceName) // cancels the busy run: a dead process settles nothing
		// The next moment runs on the living; the first one's share waits
		// for its lease (a heartbeat) to run out, then runs there too.
		var got []schedule.Run
		for len(got) < 3 {
			c.moment()
			c.armed()
			for len(c.runs) > 0 {
				got = append(got, <-c.runs)
			}
			if c.clk.Now().Sub(at) > ttl {
				t.Fatalf("after %v, runs %+v; want the first moment's share taken over", c.clk.Now().Sub(at), got)
			}
		}
		var taken []schedule.Run
		for _, r := range got {
			if r.InstanceName == first.InstanceName {
				t.Fatalf("a run on the dead instance: %+v", r)
			}
			if r.FiredAt.Equal(at) {
				taken = append(taken, r)
			}
		}
		if len(taken) != 1 || taken[0].DealtTo != first.InstanceName || taken[0].Worker != 0 || taken[0].Workers != 1 {
			t.Fatalf("runs of the first moment after the crash: %+v; want one, dealt to %s", taken, first.InstanceName)
		}
		c.stopAll()
	})
}

// An instance that joins after a moment was dealt takes over the share of
// a runner that died mid-run, when no other instance is left to.
func TestJoinerTakesOverDeadShares(t *testing.T) {
	eachDatabase(t, func(t *testing.T, open opener) {
		c := newCluster(t, open)
		first := start.Add(interval)
		add := func(s *schedule.Scheduler) error {
			return s.Add("pack", schedule.Every(interval), schedule.EveryWorker, func(ctx context.Context, r schedule.Run) error {
				c.runs <- r
				if r.InstanceName == "a" && r.FiredAt.Equal(first) {
					<-ctx.Done() // busy until a dies
				}
				return nil
			})
		}
		c.start("a", 1, add)
		c.start("b", 1, add)
		c.moment()
		c.collect(2)
		c.crash("a")
		c.stop("b")
		c.start("c", 1, add)
		for {
			if c.clk.Now().Sub(first) > ttl {
				t.Fatal("a's share of the first moment was never taken over")
			}
			c.moment()
			c.armed()
			found := false
			for len(c.runs) > 0 {
				r := <-c.runs
				if r.FiredAt.Equal(first) {
					if r.InstanceName != "c" || r.DealtTo != "a" || r.Worker != 0 || r.Workers != 2 {
						t.Fatalf("first moment's share run as %+v; want a's share 0 of 2 run by c", r)
					}
					found = true
				}
			}
			if found {
				break
			}
		}
		c.stopAll()
	})
}
