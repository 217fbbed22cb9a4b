package schedule_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/internal/testdb"
	"github.com/sqlinbox/sqlinbox/migrations"
	"github.com/sqlinbox/sqlinbox/schedule"
)

// The instances of TestKilledInstanceShareRunsElsewhere are this test
// binary run again as a helper process: with helperEnv set, TestMain runs
// one instance until SIGTERM instead of the tests.
const helperEnv = "SCHEDULE_TEST_HELPER"

// The helpers' pace: a moment every second, each of the 2x2 runs busy for
// 300 ms; heartbeats (and so shares' leases) every second, lasting four.
const (
	killInterval = time.Second
	killBeat     = time.Second
	killTTL      = 4 * time.Second
	killBusy     = 300 * time.Millisecond
	killItems    = 40
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(helperEnv); spec != "" {
		os.Exit(helper(spec))
	}
	// A goroutine the package started that outlives its tests fails the run.
	goleak.VerifyTestMain(m)
}

// helper runs instance name on database url (spec is "name url", or "name
// url catchup" for a schedule with CatchUp) and prints "start" and "end"
// lines for each run until SIGTERM, then stops.
func helper(spec string) int {
	name, url, _ := strings.Cut(spec, " ")
	url, mode, _ := strings.Cut(url, " ")
	db, _, err := dialect.Open(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer db.Close()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := schedule.New(db, schedule.Instance(name), schedule.HeartbeatEvery(killBeat), schedule.HeartbeatTTL(killTTL), schedule.WithLogger(logger))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	out := make(chan string, 1000)
	pack := func(ctx context.Context, r schedule.Run) error {
		line := fmt.Sprintf("%d %d %d %s %s", r.FiredAt.UnixMilli(), r.Worker, r.Workers, r.InstanceName, r.DealtTo)
		out <- fmt.Sprintf("start %s %d", line, time.Now().UnixNano())
		select {
		case <-time.After(killBusy):
			out <- fmt.Sprintf("end %s %d", line, time.Now().UnixNano())
			return nil
		case <-ctx.Done():
			out <- fmt.Sprintf("cancel %s %d", line, time.Now().UnixNano())
			return ctx.Err()
		}
	}
	opts := []schedule.AddOption{schedule.Workers(2)}
	if mode == "catchup" {
		opts = append(opts, schedule.CatchUp(time.Minute, 100))
	}
	if err := s.Add("pack", schedule.Every(killInterval), schedule.EveryWorker, pack, opts...); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	if err := s.Start(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	w := bufio.NewWriter(os.Stdout)
	for {
		select {
		case l := <-out:
			fmt.Fprintln(w, l)
			w.Flush()
		case <-term:
			err := s.Stop(context.Background())
			close(out)
			for l := range out {
				fmt.Fprintln(w, l)
			}
			w.Flush()
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			return 0
		}
	}
}

// event is one line of a helper.
type event struct {
	kind            string // start, end, cancel
	moment          int64
	worker, workers int
	instance, dealt string
	at              time.Time
}

func parseEvent(line string) (event, error) {
	var e event
	var at int64
	_, err := fmt.Sscanf(line, "%s %d %d %d %s %s %d", &e.kind, &e.moment, &e.worker, &e.workers, &e.instance, &e.dealt, &at)
	e.at = time.Unix(0, at)
	return e, err
}

// proc is a running helper.
type proc struct {
	cmd *exec.Cmd
}

func startHelper(t *testing.T, name, url string, events chan<- event) *proc {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+name+" "+url)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			e, err := parseEvent(sc.Text())
			if err != nil {
				t.Errorf("helper %s: %q: %v", name, sc.Text(), err)
				continue
			}
			events <- e
		}
	}()
	return &proc{cmd: cmd}
}

// A SIGKILL of one of two instances loses none of its share: the share it
// was running is taken over once its lease runs out, and so are the shares
// dealt to it until its heartbeat expires; no share runs twice at once.
func TestKilledInstanceShareRunsElsewhere(t *testing.T) {
	eachDatabaseURL(t, func(t *testing.T, url string) {
		events := make(chan event, 10000)
		a := startHelper(t, "a", url, events)
		b := startHelper(t, "b", url, events)
		var all []event
		next := func() event {
			t.Helper()
			select {
			case e := <-events:
				all = append(all, e)
				return e
			case <-time.After(wait):
				t.Fatalf("no run for %v; events so far: %v", wait, all)
			}
			return event{}
		}
		// Both in the membership for two moments, then b is killed while
		// it runs a share.
		shared := map[int64]bool{}
		for len(shared) < 2 {
			if e := next(); e.kind == "end" && e.workers == 4 && e.instance == "b" {
				shared[e.moment] = true
			}
		}
		for e := next(); e.kind != "start" || e.instance != "b"; e = next() {
		}
		if err := b.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		b.cmd.Wait()
		for time.Since(killed) < killTTL+6*killInterval {
			next()
		}
		if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := a.cmd.Wait(); err != nil {
			t.Fatalf("a after SIGTERM: %v", err)
		}
		for len(events) > 0 {
			next()
		}
		report(t, all, killed, slices.Min(keys(shared)))
	})
}

func keys(m map[int64]bool) []int64 {
	var out []int64
	for k := range m {
		out = append(out, k)
	}
	return out
}

// report checks and logs, moment by moment from first, which items the
// completed runs covered, whether any share ran twice at once, and how long
// the dead instance's shares waited.
func report(t *testing.T, all []event, killed time.Time, first int64) {
	t.Helper()
	type share struct {
		moment int64
		worker int
	}
	starts := map[share][]event{}
	covered := map[int64]map[int]bool{}
	var moments []int64
	var takeovers []string
	var takenAfter []time.Duration
	var late []time.Duration // a run's start after its moment, on the instance dealt the share
	for _, e := range all {
		if e.moment < first {
			continue
		}
		if _, ok := covered[e.moment]; !ok {
			covered[e.moment] = map[int]bool{}
			moments = append(moments, e.moment)
		}
		k := share{e.moment, e.worker}
		switch e.kind {
		case "start":
			for _, s := range starts[k] {
				// The earlier run of the share must have ended: by its
				// end line, or by the kill.
				if s.instance == "b" && e.at.After(killed) {
					continue
				}
				ended := false
				for _, x := range all {
					if x.kind != "start" && x.moment == e.moment && x.worker == e.worker && x.instance == s.instance && !x.at.After(e.at) {
						ended = true
					}
				}
				if !ended {
					t.Errorf("share %d of moment %d ran twice at once: on %s and on %s", e.worker, e.moment, s.instance, e.instance)
				}
			}
			starts[k] = append(starts[k], e)
			if e.dealt == e.instance {
				late = append(late, e.at.Sub(time.UnixMilli(e.moment)))
			}
			if e.dealt != e.instance {
				wait := e.at.Sub(time.UnixMilli(e.moment))
				if e.moment*int64(time.Millisecond) < killed.UnixNano() && time.UnixMilli(e.moment).Add(killInterval).After(killed) {
					wait = e.at.Sub(killed) // the share b was running, or about to
				}
				takenAfter = append(takenAfter, wait)
				takeovers = append(takeovers, fmt.Sprintf("%s took share %d of moment %s from %s after %v",
					e.instance, e.worker, time.UnixMilli(e.moment).UTC().Format("15:04:05"), e.dealt, wait.Round(time.Millisecond)))
			}
		case "end":
			for n := range killItems {
				if n%e.workers == e.worker {
					covered[e.moment][n] = true
				}
			}
		}
	}
	slices.Sort(moments)
	// The last moments may still wait for their shares when a stopped.
	moments = moments[:len(moments)-int((killBeat+killInterval)/killInterval)-1]
	missed := 0
	var lines []string
	for _, m := range moments {
		n := len(covered[m])
		if n < killItems {
			missed++
		}
		lines = append(lines, fmt.Sprintf("%s: %d/%d", time.UnixMilli(m).UTC().Format("15:04:05"), n, killItems))
	}
	t.Logf("killed b at %s; items done per moment: %s", killed.UTC().Format("15:04:05.000"), strings.Join(lines, ", "))
	t.Logf("takeovers:\n  %s", strings.Join(takeovers, "\n  "))
	if len(takenAfter) > 0 {
		t.Logf("moments missing an item: %d of %d; takeover waits: min %v, max %v",
			missed, len(moments), slices.Min(takenAfter).Round(time.Millisecond), slices.Max(takenAfter).Round(time.Millisecond))
	}
	slices.Sort(late)
	if len(late) > 0 {
		t.Logf("runs started after their moment: p50 %v, p90 %v, max %v (%d runs)", late[len(late)/2].Round(100*time.Microsecond),
			late[len(late)*9/10].Round(100*time.Microsecond), late[len(late)-1].Round(100*time.Microsecond), len(late))
	}
	if missed > 1 {
		t.Errorf("%d moments missed items after the kill; want at most one", missed)
	}
	if len(takeovers) == 0 {
		t.Errorf("no share of the killed instance was taken over")
	}
}

// eachDatabaseURL runs f with the URL of a fresh SQLite file and, with
// POSTGRES_TEST_URL, of a fresh Postgres schema, and with MYSQL_TEST_URL, of
// a fresh MariaDB/MySQL database, all migrated: databases that several
// processes share.
func eachDatabaseURL(t *testing.T, f func(t *testing.T, url string)) {
	for _, db := range []string{"sqlite-file", "postgres", "mysql"} {
		t.Run(db, func(t *testing.T) {
			t.Parallel()
			url := "sqlite://" + filepath.Join(t.TempDir(), "sched.db")
			switch db {
			case "postgres":
				url = postgresURL(t)
			case "mysql":
				url = testdb.MySQL(t)
			}
			pool, _, err := dialect.Open(url)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			if err := migrations.ApplySchedules(context.Background(), pool); err != nil {
				t.Fatal(err)
			}
			f(t, url)
		})
	}
}
