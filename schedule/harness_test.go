package schedule_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/internal/testdb"
	"github.com/sqlinbox/sqlinbox/migrations"
	"github.com/sqlinbox/sqlinbox/schedule"
)

// wait bounds every wait of these tests: generous, since CI machines are
// shared and noisy.
const wait = 30 * time.Second

// Moments come every minute; heartbeats every two minutes and last five, so
// a dead instance drops out within five moments. A share's lease is a
// heartbeat, renewed every 40 s: longer than the clock's one-minute steps,
// so a step never lets the lease of a running share end before its renewal.
const (
	interval = time.Minute
	beat     = 2 * time.Minute
	ttl      = 5 * time.Minute
)

var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// opener opens a new pool on the test's database, as another instance would.
type opener func(t *testing.T) *sql.DB

func randomName() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// eachDatabase runs f on a fresh SQLite memory database and, with
// POSTGRES_TEST_URL, on a fresh Postgres schema, and with MYSQL_TEST_URL,
// on a fresh MariaDB/MySQL database.
func eachDatabase(t *testing.T, f func(t *testing.T, open opener)) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		url := "sqlite://:memory:sched_" + randomName()
		open := func(t *testing.T) *sql.DB {
			db, _, err := dialect.Open(url)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			return db
		}
		anchor := open(t) // keeps the memory database alive for the test
		if err := migrations.ApplySchedules(context.Background(), anchor); err != nil {
			t.Fatal(err)
		}
		f(t, open)
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		url := postgresURL(t)
		open := func(t *testing.T) *sql.DB {
			db, _, err := dialect.Open(url)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			return db
		}
		if err := migrations.ApplySchedules(context.Background(), open(t)); err != nil {
			t.Fatal(err)
		}
		f(t, open)
	})
	t.Run("mysql", func(t *testing.T) {
		t.Parallel()
		url := testdb.MySQL(t)
		open := func(t *testing.T) *sql.DB {
			db, _, err := dialect.Open(url)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			return db
		}
		if err := migrations.ApplySchedules(context.Background(), open(t)); err != nil {
			t.Fatal(err)
		}
		f(t, open)
	})
}

// postgresURL makes a schema of the test's own on POSTGRES_TEST_URL, dropped
// at its end, and returns a URL whose search_path is that schema.
func postgresURL(t *testing.T) string {
	base := os.Getenv("POSTGRES_TEST_URL")
	if base == "" {
		t.Skip("POSTGRES_TEST_URL is not set: skipping a Postgres test")
	}
	ctx := context.Background()
	admin, _, err := dialect.Open(base)
	if err != nil {
		t.Fatal(err)
	}
	schema := "sched_" + randomName()
	if _, err := admin.ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
		admin.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := admin.ExecContext(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
		admin.Close()
	})
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	return base + sep + "search_path=" + schema
}

// cluster is a set of instances sharing one database and one fake clock.
type cluster struct {
	t    *testing.T
	open opener
	clk  *clock.Fake
	runs chan schedule.Run
	// timers counts the clock timers the running instances keep armed
	// between moments: heartbeat, sweep, renewal, and one per schedule.
	timers int
	live   map[string]*schedule.Scheduler
	log    *syncBuffer
}

func newCluster(t *testing.T, open opener) *cluster {
	return &cluster{t: t, open: open, clk: clock.NewFake(start), runs: make(chan schedule.Run, 10000),
		live: map[string]*schedule.Scheduler{}, log: &syncBuffer{}}
}

// record is a handler that reports each run to the cluster.
func (c *cluster) record(ctx context.Context, r schedule.Run) error {
	c.runs <- r
	return nil
}

// start makes, fills and starts instance name with workers workers; add
// adds its schedules (one each, for the timer count).
func (c *cluster) start(name string, workers int, add func(s *schedule.Scheduler) error) *schedule.Scheduler {
	c.t.Helper()
	s, err := schedule.New(c.open(c.t), schedule.Instance(name), schedule.DefaultWorkers(workers), schedule.WithClock(c.clk), schedule.HeartbeatEvery(beat), schedule.HeartbeatTTL(ttl), schedule.WithLogger(slogTo(c.log)))
	if err != nil {
		c.t.Fatal(err)
	}
	if err := add(s); err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		s.Stop(ctx)
	})
	c.timers += 4
	c.live[name] = s
	return s
}

// stop stops instance name cleanly.
func (c *cluster) stop(name string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := c.live[name].Stop(ctx); err != nil {
		c.t.Fatal(err)
	}
	delete(c.live, name)
	c.timers -= 4
}

// crash ends instance name without leaving.
func (c *cluster) crash(name string) {
	schedule.Crash(c.live[name])
	delete(c.live, name)
	c.timers -= 4
}

// armed waits until every instance has handled the last moment and armed
// its timers for the next.
func (c *cluster) armed() {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := c.clk.WaitTimers(ctx, c.timers); err != nil {
		c.t.Fatalf("waiting for %d timers (have %d): %v", c.timers, c.clk.Pending(), err)
	}
}

// moment waits for the instances to be ready, moves the clock to the next
// moment and returns it.
func (c *cluster) moment() time.Time {
	c.t.Helper()
	c.armed()
	c.clk.Advance(interval)
	return c.clk.Now()
}

// collect waits for n runs.
func (c *cluster) collect(n int) []schedule.Run {
	c.t.Helper()
	var out []schedule.Run
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for len(out) < n {
		select {
		case r := <-c.runs:
			out = append(out, r)
		case <-deadline.C:
			c.t.Fatalf("got %d runs, want %d: %+v\nlog:\n%s", len(out), n, out, c.log)
		}
	}
	return out
}

// stopAll stops every instance and reports runs that no step collected.
func (c *cluster) stopAll() []schedule.Run {
	c.t.Helper()
	for name := range c.live {
		c.stop(name)
	}
	var extra []schedule.Run
	for {
		select {
		case r := <-c.runs:
			extra = append(extra, r)
		default:
			return extra
		}
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// openURL opens a pool on url, closed at the test's end.
func openURL(t *testing.T, url string) *sql.DB {
	db, _, err := dialect.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
