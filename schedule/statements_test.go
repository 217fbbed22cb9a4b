package schedule_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"modernc.org/sqlite"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/migrations"
	"github.com/sqlinbox/sqlinbox/schedule"
)

// counter counts the statements sent through its driver, by their first
// words, so a test can tell what a fire costs.
type counter struct {
	mu    sync.Mutex
	texts map[string]int
}

func (c *counter) add(q string) {
	f := strings.Fields(q)
	if len(f) > 4 {
		f = f[:4]
	}
	c.mu.Lock()
	c.texts[strings.Join(f, " ")]++
	c.mu.Unlock()
}

func (c *counter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.texts
	c.texts = map[string]int{}
	return t
}

type countDriver struct {
	inner driver.Driver
	c     *counter
}

func (d countDriver) Open(name string) (driver.Conn, error) {
	conn, err := d.inner.Open(name)
	if err != nil {
		return nil, err
	}
	return countConn{conn, d.c}, nil
}

type countConn struct {
	driver.Conn
	c *counter
}

func (c countConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	c.c.add(q)
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, q, args)
}

func (c countConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	c.c.add(q)
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, q, args)
}

func (c countConn) BeginTx(ctx context.Context, o driver.TxOptions) (driver.Tx, error) {
	c.c.add("BEGIN")
	tx, err := c.Conn.(driver.ConnBeginTx).BeginTx(ctx, o)
	if err != nil {
		return nil, err
	}
	return countTx{tx, c.c}, nil
}

type countTx struct {
	driver.Tx
	c *counter
}

func (t countTx) Commit() error { t.c.add("COMMIT"); return t.Tx.Commit() }

var errTest = errors.New("test: this run fails")

var counted = &counter{texts: map[string]int{}}

func init() { sql.Register("counted-sqlite", countDriver{&sqlite.Driver{}, counted}) }

// A moment of a One schedule on one instance costs the read of its
// placement override (an operator's, which every instance honours from the
// next moment on), the statements of its deal (members, moment, shares in
// one transaction), its claim and its settlement, and nothing more: what
// the dashboard reads (next moments, failures) rides on the heartbeat. The
// figure is logged; the bound is the statements counted when the failures
// were added (5 and a transaction), and the override's read.
func TestStatementsPerFire(t *testing.T) {
	dsn, err := dialect.SQLiteDSN("sqlite://:memory:count_" + randomName())
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("counted-sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if err := migrations.ApplySchedules(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := migrations.ApplyRegistry(ctx, db); err != nil { // the overrides' table: read at each moment
		t.Fatal(err)
	}
	clk := clock.NewFake(start)
	// Heartbeats and sweeps far apart: only the moments send statements.
	s, err := schedule.New(db, schedule.Instance("a"), schedule.WithClock(clk), schedule.HeartbeatEvery(time.Hour), schedule.WithLogger(slogTo(io.Discard)))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}, 100)
	fail := true
	if err := s.Add("count", schedule.Every(time.Minute), schedule.One, func(ctx context.Context, r schedule.Run) error {
		defer func() { done <- struct{}{} }()
		if fail = !fail; fail {
			return errTest
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	const moments = 10
	counted.take()
	for range moments {
		if err := clk.WaitTimers(wctx, 4); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Minute)
		select {
		case <-done:
		case <-wctx.Done():
			t.Fatal("a moment did not run")
		}
	}
	stopped := 0
	if err := s.Stop(wctx); err != nil { // waits for the last settlement
		t.Fatal(err)
	}
	stopped = 2 // Stop deletes the heartbeats and the name's hold
	texts := counted.take()
	total := -stopped
	for text, n := range texts {
		total += n
		t.Logf("%4d  %s", n, text)
	}
	perFire := float64(total) / moments
	t.Logf("%.1f statements per fire (transaction begin and commit counted), %d moments, half failing", perFire, moments)
	if perFire > 8 {
		t.Errorf("%.1f statements per fire, want at most 8", perFire)
	}
}
