package schedule_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/testdb"
	"github.com/sqlinbox/sqlinbox/migrations"
	"github.com/sqlinbox/sqlinbox/schedule"
)

// byMoment groups runs by FiredAt (Unix milliseconds).
func byMoment(runs []schedule.Run) map[int64][]schedule.Run {
	out := map[int64][]schedule.Run{}
	for _, r := range runs {
		out[r.FiredAt.UnixMilli()] = append(out[r.FiredAt.UnixMilli()], r)
	}
	return out
}

// dealtOnce fails unless the runs of moment at are its shares 0..Workers-1,
// each once, all agreeing on Workers and Instances.
func dealtOnce(t *testing.T, at time.Time, runs []schedule.Run) {
	t.Helper()
	if len(runs) == 0 {
		t.Errorf("moment %v: no run", at)
		return
	}
	if got, want := workersOf(runs), seq(0, runs[0].Workers-1); !slices.Equal(got, want) {
		t.Errorf("moment %v: workers %v, want %v each once", at, got, want)
	}
	for _, r := range runs {
		if r.Workers != runs[0].Workers || r.Instances != runs[0].Instances || !r.FiredAt.Equal(at) {
			t.Errorf("moment %v: run %+v disagrees with %+v", at, r, runs[0])
		}
	}
}

// Every instance stops for five moments, then one starts: each missed
// moment runs once there, with its own FiredAt and its shares dealt as a
// moment on time is, then the schedule goes on; for every placement.
func TestCatchUpRunsEachMissedMomentOnce(t *testing.T) {
	for _, p := range []schedule.Placement{schedule.One, schedule.EveryInstance, schedule.EveryWorker} {
		t.Run(p.String(), func(t *testing.T) {
			eachDatabase(t, func(t *testing.T, open opener) {
				c := newCluster(t, open)
				add := func(s *schedule.Scheduler) error {
					return s.Add("pack", schedule.Every(interval), p, c.record, schedule.CatchUp(time.Hour, 100))
				}
				perInstance := map[schedule.Placement]int{schedule.One: 0, schedule.EveryInstance: 1, schedule.EveryWorker: 2}[p]
				shares := func(instances int) int { return max(1, instances*perInstance) }
				c.start("a", 2, add)
				c.start("b", 2, add)
				for range 2 {
					c.moment()
					c.collect(shares(2))
				}
				c.stop("a")
				c.stop("b")
				last := c.clk.Now()
				c.clk.Advance(5 * interval) // every instance away for five moments
				c.start("a", 2, add)
				c.armed() // the catch-up is fired: the loop waits for the next moment
				runs := byMoment(c.collect(5 * shares(1)))
				for k := 1; k <= 5; k++ {
					at := last.Add(time.Duration(k) * interval)
					dealtOnce(t, at, runs[at.UnixMilli()])
					for _, r := range runs[at.UnixMilli()] {
						if r.Instances != 1 || r.InstanceName != "a" {
							t.Errorf("moment %v: run %+v, want it dealt to a alone", at, r)
						}
					}
				}
				if len(runs) != 5 {
					t.Errorf("caught up %d moments, want the 5 missed", len(runs))
				}
				at := c.moment()
				dealtOnce(t, at, c.collect(shares(1)))
				if extra := c.stopAll(); len(extra) > 0 {
					t.Fatalf("runs beyond the moments: %+v\n%s", extra, c.log)
				}
			})
		})
	}
}

// Two instances come back at once after five moments away: each missed
// moment still runs once per share, the insert of its row deciding who
// deals it.
func TestCatchUpByTwoInstancesAtOnce(t *testing.T) {
	for _, p := range []schedule.Placement{schedule.One, schedule.EveryWorker} {
		t.Run(p.String(), func(t *testing.T) {
			eachDatabase(t, func(t *testing.T, open opener) {
				c := newCluster(t, open)
				add := func(s *schedule.Scheduler) error {
					return s.Add("pack", schedule.Every(interval), p, c.record, schedule.CatchUp(time.Hour, 100))
				}
				per := 1
				if p == schedule.EveryWorker {
					per = 4 // two instances of two workers
				}
				c.start("a", 2, add)
				c.start("b", 2, add)
				c.moment()
				c.collect(per)
				c.stop("a")
				c.stop("b")
				last := c.clk.Now()
				c.clk.Advance(5 * interval)
				c.start("a", 2, add)
				c.start("b", 2, add)
				c.armed()
				// A share dealt to an instance whose catch-up had read past
				// its moment is run by a sweep once its reservation ends.
				for range 3 {
					c.moment()
				}
				c.armed() // the last moment is fired everywhere
				runs := byMoment(c.stopAll())
				for k := 1; k <= 8; k++ {
					at := last.Add(time.Duration(k) * interval)
					dealtOnce(t, at, runs[at.UnixMilli()])
				}
				if len(runs) != 8 {
					t.Errorf("%d moments ran, want 5 caught up and 3 on time", len(runs))
				}
			})
		})
	}
}

// The window and the count bound a catch-up: of five missed moments, a
// window of two and a half intervals runs the last three, a count of two
// the last two, and a schedule without CatchUp none. What is left out is
// logged.
func TestCatchUpWindowAndCount(t *testing.T) {
	eachDatabase(t, func(t *testing.T, open opener) {
		c := newCluster(t, open)
		add := func(s *schedule.Scheduler) error {
			if err := s.Add("window", schedule.Every(interval), schedule.One, c.record, schedule.CatchUp(5*interval/2, 100)); err != nil {
				return err
			}
			if err := s.Add("count", schedule.Every(interval), schedule.One, c.record, schedule.CatchUp(time.Hour, 2)); err != nil {
				return err
			}
			return s.Add("none", schedule.Every(interval), schedule.One, c.record)
		}
		c.start("a", 1, add)
		c.timers += 2 // three schedules
		c.moment()
		c.collect(3)
		c.stop("a")
		c.timers -= 2
		last := c.clk.Now()
		c.clk.Advance(5 * interval)
		c.start("a", 1, add)
		c.timers += 2
		c.armed()
		got := map[string][]int{}
		for _, r := range c.collect(5) {
			got[r.Schedule] = append(got[r.Schedule], int(r.FiredAt.Sub(last)/interval))
		}
		for name, want := range map[string][]int{"window": {3, 4, 5}, "count": {4, 5}} {
			slices.Sort(got[name])
			if !slices.Equal(got[name], want) {
				t.Errorf("%s caught up the moments %v after the last, want %v", name, got[name], want)
			}
		}
		if extra := c.stopAll(); len(extra) > 0 {
			t.Fatalf("runs beyond the bounds (none must not catch up): %+v", extra)
		}
		for _, name := range []string{"window", "count"} {
			if !strings.Contains(c.log.String(), "are not run\" schedule="+name) {
				t.Errorf("the moments %s left out are not logged:\n%s", name, c.log)
			}
		}
	})
}

// An hourly schedule runs at 01:00, its instance lives on past the
// moments' retention (the prune keeps a schedule's latest moment), stops,
// and starts again five hours later: the five moments missed run, and the
// share of the 02:00 moment, five hours old, keeps its lease while it runs
// across heartbeats that prune old moments and shares. The rows of the
// moments caught up outlive that prune, so no instance runs them again.
func TestCatchUpOutlivesThePrune(t *testing.T) {
	eachDatabase(t, func(t *testing.T, open opener) {
		c := newCluster(t, open)
		release, lost := make(chan struct{}), make(chan error, 1)
		var once sync.Once
		free := func() { once.Do(func() { close(release) }) }
		t.Cleanup(free)
		slow := start.Add(2 * time.Hour)
		add := func(s *schedule.Scheduler) error {
			return s.Add("hourly", schedule.Every(time.Hour), schedule.One, func(ctx context.Context, r schedule.Run) error {
				c.runs <- r
				if r.FiredAt.Equal(slow) {
					select {
					case <-release:
					case <-ctx.Done():
						lost <- context.Cause(ctx)
					}
				}
				return nil
			}, schedule.CatchUp(24*time.Hour, 10))
		}
		c.start("a", 1, add)
		for range 60 {
			c.moment()
		}
		if r := c.collect(1)[0]; !r.FiredAt.Equal(start.Add(time.Hour)) {
			t.Fatalf("run %+v, want 01:00", r)
		}
		for range 59 { // past MomentRetention (10 x 5 min) of heartbeats and prunes
			c.moment()
		}
		c.stop("a")
		c.clk.Advance(5 * time.Hour) // 06:59
		c.start("a", 1, add)
		c.armed()
		runs := c.collect(5)
		var hours []int
		for _, r := range runs {
			hours = append(hours, r.FiredAt.Hour())
		}
		slices.Sort(hours)
		if !slices.Equal(hours, []int{2, 3, 4, 5, 6}) {
			t.Fatalf("caught up the hours %v, want 2..6\n%s", hours, c.log)
		}
		for range 5 { // heartbeats prune, the 02:00 share is renewed
			c.moment()
		}
		if r := c.collect(1)[0]; r.FiredAt.Hour() != 7 { // on time
			t.Fatalf("run %+v, want 07:00", r)
		}
		select {
		case err := <-lost:
			t.Fatalf("the 02:00 share, caught up five hours late, was lost while it ran: %v\n%s", err, c.log)
		default:
		}
		free()
		st, err := schedule.Inspect(context.Background(), open(t), 20)
		if err != nil {
			t.Fatal(err)
		}
		var kept []int
		for _, m := range st.Moments {
			kept = append(kept, m.FiredAt.Hour())
		}
		slices.Sort(kept)
		if !slices.Equal(kept, []int{2, 3, 4, 5, 6, 7}) {
			t.Errorf("moments kept after the prune: hours %v, want 2..7 (01:00 pruned, the caught-up ones kept)", kept)
		}
		c.start("b", 1, add) // b finds the moments caught up: nothing to run
		c.armed()
		if extra := c.stopAll(); len(extra) > 0 {
			t.Fatalf("moments run again: %+v\n%s", extra, c.log)
		}
		if n := strings.Count(c.log.String(), "catching up"); n != 1 {
			t.Errorf("%d catch-ups logged, want 1 (a's)", n)
		}
	})
}

// Real processes: two instances run a schedule every second with CatchUp,
// both are stopped (SIGTERM) for five moments and more, then one starts
// again: each moment after the last one written runs once, its two shares
// each once on the one instance, and the schedule goes on.
func TestCatchUpAfterEveryInstanceStopped(t *testing.T) {
	eachDatabaseURL(t, func(t *testing.T, url string) {
		events := make(chan event, 10000)
		a := startHelper(t, "a", url+" catchup", events)
		b := startHelper(t, "b", url+" catchup", events)
		next := func() event {
			t.Helper()
			select {
			case e := <-events:
				return e
			case <-time.After(wait):
				t.Fatalf("no run for %v", wait)
			}
			return event{}
		}
		for shared := 0; shared < 2; { // both in two moments
			if e := next(); e.kind == "end" && e.workers == 4 && e.instance == "b" {
				shared++
			}
		}
		for _, p := range []*proc{a, b} {
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if err := p.cmd.Wait(); err != nil {
				t.Fatalf("after SIGTERM: %v", err)
			}
		}
		stopped := time.Now()
		db := openURL(t, url)
		st, err := schedule.Inspect(context.Background(), db, 1)
		if err != nil || len(st.Moments) != 1 {
			t.Fatalf("the latest moment: %v, %v", st.Moments, err)
		}
		last := st.Moments[0].FiredAt
		time.Sleep(5*killInterval + killInterval/2) // every instance away: the point of the test
		restarted := time.Now()
		a = startHelper(t, "a", url+" catchup", events)
		// Runs until two moments after the restart have ended on time.
		var after []event
		var caughtUp time.Duration
		onTime := restarted.Add(2 * killInterval).UnixMilli()
		for {
			e := next()
			if e.moment <= last.UnixMilli() {
				continue // a late line of the instances stopped
			}
			after = append(after, e)
			if e.kind == "end" && e.moment < restarted.UnixMilli() {
				caughtUp = max(caughtUp, e.at.Sub(restarted))
			}
			if e.kind == "end" && e.moment >= onTime {
				break
			}
		}
		if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := a.cmd.Wait(); err != nil {
			t.Fatalf("after SIGTERM: %v", err)
		}
		ends := map[int64][]int{}
		for _, e := range after {
			if e.kind == "end" {
				ends[e.moment] = append(ends[e.moment], e.worker)
			}
			if e.kind != "cancel" && (e.workers != 2 || e.instance != "a") {
				t.Errorf("run %+v, want one of 2 shares, on a", e)
			}
		}
		missed := 0
		for m := last.Add(killInterval); m.UnixMilli() < onTime; m = m.Add(killInterval) {
			ws := ends[m.UnixMilli()]
			slices.Sort(ws)
			if !slices.Equal(ws, []int{0, 1}) {
				t.Errorf("moment %s: shares %v ended, want 0 and 1 once each", m.UTC().Format("15:04:05"), ws)
			}
			if m.Before(restarted) {
				missed++
			}
		}
		t.Logf("stopped both at %s after the moment %s; a back %v later; %d moments missed, all run within %v of the restart",
			stopped.UTC().Format("15:04:05.000"), last.UTC().Format("15:04:05"), restarted.Sub(stopped).Round(time.Millisecond),
			missed, caughtUp.Round(time.Millisecond))
		if missed < 5 {
			t.Errorf("%d moments missed, want at least 5", missed)
		}
	})
}

// The one instance reaches the database through a proxy that is cut for
// three moments: they cannot be written, and the first moment after the
// database is back runs them first, each once, then itself.
func TestCatchUpAfterTheDatabaseWasUnreachable(t *testing.T) {
	for name, url := range map[string]func(*testing.T) string{"postgres": postgresURL, "mysql": func(t *testing.T) string { return testdb.MySQL(t) }} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			direct := url(t)
			if err := migrations.ApplySchedules(context.Background(), openURL(t, direct)); err != nil {
				t.Fatal(err)
			}
			p, via := testdb.NewProxy(t, direct)
			c := newCluster(t, func(t *testing.T) *sql.DB { return openURL(t, via) })
			c.start("a", 1, func(s *schedule.Scheduler) error {
				return s.Add("tick", schedule.Every(interval), schedule.One, c.record, schedule.CatchUp(time.Hour, 100))
			})
			c.moment()
			first := c.collect(1)[0]
			// Its handler returned, but its done may not be written yet: cut
			// then, the done outlives its lease (the fake clock passes it)
			// and the catch-up runs the share again, as it should.
			waitShareDone(t, openURL(t, direct), first)
			p.Cut()
			var lost []time.Time
			for range 3 {
				lost = append(lost, c.moment())
			}
			c.armed() // the third moment failed too
			p.Restore()
			at := c.moment()
			runs := byMoment(c.collect(4))
			for _, m := range append(lost, at) {
				dealtOnce(t, m, runs[m.UnixMilli()])
			}
			if extra := c.stopAll(); len(extra) > 0 {
				t.Fatalf("runs beyond the moments: %+v", extra)
			}
			// The first moment fails as any does; the next ones, in the
			// catch-up that each later moment tries first.
			failed := strings.Count(c.log.String(), "moment not run") + strings.Count(c.log.String(), "catching up missed moments stopped")
			if failed != 3 {
				t.Errorf("%d moments failed while the database was cut, want 3:\n%s", failed, c.log)
			}
		})
	}
}

// With SkipWhileBusy, the missed moments run one after another: each waits
// for the run of the one before it, instead of being skipped beside it.
func TestCatchUpWithSkipWhileBusyRunsOneAfterAnother(t *testing.T) {
	eachDatabase(t, func(t *testing.T, open opener) {
		c := newCluster(t, open)
		release := make(chan struct{})
		var once sync.Once
		free := func() { once.Do(func() { close(release) }) }
		t.Cleanup(free)
		var mu sync.Mutex
		busy, most := 0, 0
		first := start.Add(2 * interval)
		add := func(s *schedule.Scheduler) error {
			return s.Add("report", schedule.Every(interval), schedule.One, func(ctx context.Context, r schedule.Run) error {
				mu.Lock()
				busy++
				most = max(most, busy)
				mu.Unlock()
				c.runs <- r
				if r.FiredAt.Equal(first) {
					<-release
				}
				mu.Lock()
				busy--
				mu.Unlock()
				return nil
			}, schedule.SkipWhileBusy(), schedule.CatchUp(time.Hour, 100))
		}
		c.start("a", 1, add)
		c.moment()
		c.collect(1)
		c.stop("a")
		c.clk.Advance(5 * interval)
		c.start("a", 1, add)
		if r := c.collect(1)[0]; !r.FiredAt.Equal(first) {
			t.Fatalf("run %+v, want the first missed moment %v", r, first)
		}
		free()
		runs := c.collect(4)
		for i, r := range runs {
			if want := first.Add(time.Duration(i+1) * interval); !r.FiredAt.Equal(want) {
				t.Errorf("run %d caught up %v, want %v (in order)", i, r.FiredAt, want)
			}
		}
		c.armed()
		if extra := c.stopAll(); len(extra) > 0 {
			t.Fatalf("runs beyond the moments: %+v", extra)
		}
		if most != 1 {
			t.Errorf("%d runs at once, want 1", most)
		}
	})
}

// An instance dies while it runs its shares of a moment, and no instance is
// left to take them over within a heartbeat TTL: the instance that comes
// back takes them over as it catches up, then runs the moments missed.
func TestCatchUpTakesOverSharesLeftUnfinished(t *testing.T) {
	eachDatabase(t, func(t *testing.T, open opener) {
		c := newCluster(t, open)
		add := func(s *schedule.Scheduler) error {
			return s.Add("pack", schedule.Every(interval), schedule.EveryWorker, func(ctx context.Context, r schedule.Run) error {
				c.runs <- r
				if r.InstanceName == "b" {
					<-ctx.Done() // busy until b dies
					return ctx.Err()
				}
				return nil
			}, schedule.CatchUp(time.Hour, 100))
		}
		c.start("a", 2, add)
		c.start("b", 2, add)
		first := c.moment()
		c.collect(4)                 // b's two shares are running
		c.stop("a")                  // a's two are done
		c.crash("b")                 // b's two are left unfinished, their lease held
		c.clk.Advance(10 * interval) // past b's heartbeat and any sweep's look back
		c.start("a", 2, add)
		c.armed()
		runs := byMoment(c.collect(2 + 10*2))
		taken := runs[first.UnixMilli()]
		if got := workersOf(taken); !slices.Equal(got, []int{2, 3}) {
			t.Errorf("shares of the first moment run again: %v, want b's 2 and 3", got)
		}
		for _, r := range taken {
			if r.DealtTo != "b" || r.InstanceName != "a" || r.Workers != 4 {
				t.Errorf("taken over: %+v, want b's share of 4 run on a", r)
			}
		}
		for k := 1; k <= 10; k++ {
			at := first.Add(time.Duration(k) * interval)
			dealtOnce(t, at, runs[at.UnixMilli()])
		}
		if extra := c.stopAll(); len(extra) > 0 {
			t.Fatalf("runs beyond the moments: %+v\n%s", extra, c.log)
		}
	})
}

// waitShareDone waits until r's share is marked done.
func waitShareDone(t *testing.T, db *sql.DB, r schedule.Run) {
	t.Helper()
	q := `SELECT count(*) FROM sqlinbox_schedule_shares WHERE schedule = ? AND moment = ? AND worker = ? AND done_at IS NOT NULL`
	if !strings.HasPrefix(fmt.Sprintf("%T", db.Driver()), "*mysql.") {
		q = `SELECT count(*) FROM sqlinbox_schedule_shares WHERE schedule = $1 AND moment = $2 AND worker = $3 AND done_at IS NOT NULL`
	}
	for deadline := time.Now().Add(wait); ; time.Sleep(10 * time.Millisecond) {
		var n int
		if err := db.QueryRow(q, r.Schedule, r.FiredAt.UnixMilli(), r.Worker).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the share %d of %v was not marked done within %v", r.Worker, r.FiredAt, wait)
		}
	}
}
