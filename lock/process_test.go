package lock_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/testdb"
	"github.com/sqlinbox/sqlinbox/lock"
)

// A release on a SQLite file wakes a waiter in another process: the test
// binary runs itself as the waiting process (TestSQLiteWaiterProcess), which
// waits with a retry delay of 20s, so only a wake hands it the place in
// time; it counts its statements. Rounds: LOCK_WAKE_ROUNDS (default 30).
func TestSQLiteWakesOtherProcess(t *testing.T) {
	wakesOtherProcess(t, "sqlite://"+filepath.Join(t.TempDir(), "locks.db"))
}

// On MariaDB/MySQL, without LISTEN, a release wakes a waiter in another
// process of the host by the same datagrams, named after the server and
// database.
func TestMySQLWakesOtherProcess(t *testing.T) {
	if os.Getenv(testdb.MySQLEnv) == "" {
		t.Skipf("%s is not set: skipping the MariaDB/MySQL lock store", testdb.MySQLEnv)
	}
	wakesOtherProcess(t, testdb.MySQL(t))
}

// wakesOtherProcess is the test of a release waking a waiting process on
// the database of URL u.
func wakesOtherProcess(t *testing.T, u string) {
	holder := locker(t, openSQL(t, u, true), "procs")
	rounds := 30
	if v, err := strconv.Atoi(os.Getenv("LOCK_WAKE_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	ctx := ctxT(t)
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestSQLiteWaiterProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "LOCK_WAITER_DB="+u)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		in.Close()
		_ = cmd.Wait()
	})
	out := bufio.NewScanner(outPipe)
	line := func(want string) []string {
		t.Helper()
		for out.Scan() {
			f := strings.Fields(out.Text())
			if len(f) > 0 && f[0] == want {
				return f
			}
		}
		t.Fatalf("the waiter process ended before %q: %v", want, out.Err())
		return nil
	}
	var lat []time.Duration
	for r := range rounds {
		name := fmt.Sprintf("round-%d", r)
		h := mustTake(t, holder, name, lock.TTL(time.Minute))
		fmt.Fprintln(in, "wait", name)
		line("waiting") // it found the place held and sleeps for a wake
		at := time.Now()
		if err := holder.Release(ctx, h.Token); err != nil {
			t.Fatal(err)
		}
		f := line("took")
		ns, _ := strconv.ParseInt(f[1], 10, 64)
		statements, _ := strconv.Atoi(f[2])
		lat = append(lat, time.Unix(0, ns).Sub(at))
		if lat[r] > waiterRetry/2 {
			t.Fatalf("round %d: the waiting process took the place %v after the release: it was not woken, it retried", r, lat[r])
		}
		if statements > 2 {
			t.Errorf("round %d: the waiter ran %d acquire statements; want 2 (the try that found the place held, the woken one)", r, statements)
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	p50, p99 := lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)]
	t.Logf("release to a waiting process's take over %d rounds: p50 %v, p99 %v, max %v (retry delay %v)", rounds, p50, p99, lat[len(lat)-1], waiterRetry)
}

// waiterRetry is the waiting process's retry delay: a take later than half
// of it was not woken.
const waiterRetry = 20 * time.Second

// TestSQLiteWaiterProcess is the waiting process of
// TestSQLiteWakesOtherProcess and TestMySQLWakesOtherProcess; it does nothing in a test run of its own.
func TestSQLiteWaiterProcess(t *testing.T) {
	u := os.Getenv("LOCK_WAITER_DB")
	if u == "" {
		return
	}
	failed := make(chan struct{}, 1)
	counting := &counted{Store: openSQL(t, u, false), failed: failed}
	l := locker(t, counting, "procs")
	ctx := context.Background()
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) != 2 || f[0] != "wait" {
			continue
		}
		counting.n.Store(0)
		done := make(chan struct{})
		go func() {
			defer close(done)
			h, ok, err := l.Take(ctx, f[1], lock.TTL(time.Minute), lock.Wait(time.Minute), lock.RetryDelay(waiterRetry))
			at := time.Now().UnixNano()
			if err != nil || !ok {
				fmt.Println("failed", ok, err)
				return
			}
			fmt.Println("took", at, counting.n.Load())
			if err := l.Release(ctx, h.Token); err != nil {
				fmt.Println("failed", err)
			}
		}()
		<-failed
		fmt.Println("waiting")
		<-done
	}
}

// counted counts a store's Acquire calls and signals the first that found
// every place held.
type counted struct {
	lock.Store
	n      atomic.Int32
	failed chan struct{}
}

func (c *counted) Acquire(ctx context.Context, k lock.Key, secret string, ttl time.Duration, n int) (lock.Grant, error) {
	c.n.Add(1)
	g, err := c.Store.Acquire(ctx, k, secret, ttl, n)
	if err == nil && !g.Acquired {
		select {
		case c.failed <- struct{}{}:
		default:
		}
	}
	return g, err
}
