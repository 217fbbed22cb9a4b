package benchkit

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeChild "handles" its rows one a millisecond once it runs, and one of
// them twice when asked.
type fakeChild struct {
	rows, dup int
	delay     time.Duration // before the first row, as a table check on a cold start
	handled   atomic.Int64
	acked     atomic.Int64
}

func (f *fakeChild) Run(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(f.delay):
	}
	for range f.rows {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
		f.handled.Add(1)
		f.acked.Add(1)
	}
	f.handled.Add(int64(f.dup))
	<-ctx.Done()
	return ctx.Err()
}

func (f *fakeChild) Counts() (handled, acked, claims int64) {
	return f.handled.Load(), f.acked.Load(), f.acked.Load() / 10
}

func TestMain(m *testing.M) {
	if rows := os.Getenv("BENCHKIT_TEST_CHILD_ROWS"); rows != "" {
		n, _ := strconv.Atoi(rows)
		dup, _ := strconv.Atoi(os.Getenv("BENCHKIT_TEST_CHILD_DUP"))
		delay, _ := time.ParseDuration(os.Getenv("BENCHKIT_TEST_CHILD_DELAY") + "ms")
		if err := ServeChild(context.Background(), os.Stdin, os.Stdout, &fakeChild{rows: n, dup: dup, delay: delay}); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func child(rows, dup int) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), "BENCHKIT_TEST_CHILD_ROWS="+strconv.Itoa(rows), "BENCHKIT_TEST_CHILD_DUP="+strconv.Itoa(dup))
	return cmd
}

// The parent sums the children's acks, stops them when the sum reaches
// the rows, and counts every handling and claim they report.
func TestDrainProcsSumsChildren(t *testing.T) {
	res, err := DrainProcs(context.Background(), ProcsConfig{Jobs: 50, Timeout: time.Minute,
		Commands: []*exec.Cmd{child(20, 0), child(30, 2)}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Handled != 52 {
		t.Errorf("handled %d, want 52 (50 rows, 2 handled twice)", res.Handled)
	}
	if res.Claims != 2+3 {
		t.Errorf("claims %d, want 5", res.Claims)
	}
	if res.Seconds <= 0 || res.JobsPerSec <= 0 {
		t.Errorf("seconds %v, jobs/s %v: want both positive", res.Seconds, res.JobsPerSec)
	}
}

// The warm rate leaves out the children's start: with a start of a second
// before the first row it is well above the rate from "go".
func TestDrainProcsWarmRateLeavesOutTheStart(t *testing.T) {
	slow := func(rows int) *exec.Cmd {
		cmd := child(rows, 0)
		cmd.Env = append(cmd.Env, "BENCHKIT_TEST_CHILD_DELAY=1000")
		return cmd
	}
	res, err := DrainProcs(context.Background(), ProcsConfig{Jobs: 400, Timeout: time.Minute,
		Commands: []*exec.Cmd{slow(200), slow(200)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("from go %.0f jobs/s, warm %.0f jobs/s", res.JobsPerSec, res.WarmJobsPerSec)
	if res.WarmJobsPerSec < 1.2*res.JobsPerSec {
		t.Errorf("warm %.0f jobs/s, from go %.0f: the 1 s start is not left out", res.WarmJobsPerSec, res.JobsPerSec)
	}
}

func TestCrossed(t *testing.T) {
	ms := time.Millisecond
	if got := crossed(100, 10*ms, 300, 30*ms, 200); got != 20*ms {
		t.Errorf("halfway between 100 at 10ms and 300 at 30ms: %v, want 20ms", got)
	}
	if got := crossed(0, 0, 500, 50*ms, 100); got != 10*ms {
		t.Errorf("a fifth of the way to 500 at 50ms: %v, want 10ms", got)
	}
	if got := crossed(300, 10*ms, 300, 30*ms, 200); got != 30*ms {
		t.Errorf("no change seen: %v, want now (30ms)", got)
	}
}

// A child that dies fails the drain at once, not at its timeout.
func TestDrainProcsChildDies(t *testing.T) {
	start := time.Now()
	_, err := DrainProcs(context.Background(), ProcsConfig{Jobs: 1000, Timeout: time.Minute,
		Commands: []*exec.Cmd{child(10, 0), exitAfterReady()}})
	if err == nil {
		t.Fatal("drain with a child that exits succeeded")
	}
	if time.Since(start) > 30*time.Second {
		t.Errorf("the drain took %v to see its child gone", time.Since(start))
	}
}

// exitAfterReady is a child that says ready and exits once told to go.
func exitAfterReady() *exec.Cmd {
	return exec.Command("sh", "-c", "echo ready; read go; exit 3")
}

// A child reports every slowTick until the parent says "near", then every
// fastTick, so the reports cost little while the clock's end stays sharp.
func TestChildReportsFasterNearTheEnd(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	served := make(chan error, 1)
	go func() { served <- ServeChild(context.Background(), inR, outW, &fakeChild{rows: 1 << 20}) }()
	lines := bufio.NewScanner(outR)
	if !lines.Scan() || lines.Text() != "ready" {
		t.Fatalf("child said %q, want ready", lines.Text())
	}
	reports := make(chan struct{}, 10000)
	go func() {
		for lines.Scan() {
			if strings.HasPrefix(lines.Text(), "acked ") {
				reports <- struct{}{}
			}
		}
	}()
	// How long the next n reports take to come.
	take := func(n int) time.Duration {
		for len(reports) > 0 {
			<-reports
		}
		start := time.Now()
		for range n {
			<-reports
		}
		return time.Since(start)
	}
	if _, err := io.WriteString(inW, "go\n"); err != nil {
		t.Fatal(err)
	}
	slow := take(10)
	if _, err := io.WriteString(inW, "near\n"); err != nil {
		t.Fatal(err)
	}
	fast := take(10)
	t.Logf("10 reports took %v before near, %v after", slow, fast)
	if slow < 8*slowTick || fast*3 > slow {
		t.Errorf("10 reports took %v before near, %v after; want about %v and %v", slow, fast, 10*slowTick, 10*fastTick)
	}
	inW.Close()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	outW.Close()
}

// A drain is near its end at 5% of its rows left, or sooner when the rate so
// far says the rest takes less than ten slow reports.
func TestNearing(t *testing.T) {
	for _, c := range []struct {
		jobs    int
		done    int64
		elapsed time.Duration
		want    bool
	}{
		{200000, 100000, 4 * time.Second, false},     // 4 s left
		{200000, 190000, 8 * time.Second, true},      // 5% left
		{20000, 10000, 100 * time.Millisecond, true}, // 100 ms left
		{20000, 0, time.Second, false},               // no rate yet
	} {
		if got := nearing(c.jobs, c.done, c.elapsed); got != c.want {
			t.Errorf("nearing(%d, %d, %v) = %v, want %v", c.jobs, c.done, c.elapsed, got, c.want)
		}
	}
}
