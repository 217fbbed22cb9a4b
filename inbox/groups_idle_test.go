package inbox_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/migrations"
	"github.com/sqlinbox/sqlinbox/notify"
)

// countConnector opens pgx connections that count every statement sent
// outside a prepared statement (pgx's stdlib sends them all so).
type countConnector struct {
	url string
	n   *atomic.Int64
}

func (c countConnector) Connect(ctx context.Context) (driver.Conn, error) {
	var conn driver.Conn
	var err error
	if strings.HasPrefix(c.url, "mysql://") {
		// go-sql-driver/mysql sends each statement so too (its pools
		// interpolate their parameters).
		dsn, derr := dialect.MySQLDSN(c.url)
		if derr != nil {
			return nil, derr
		}
		conn, err = mysql.MySQLDriver{}.Open(dsn)
	} else {
		conn, err = stdlib.GetDefaultDriver().Open(c.url)
	}
	if err != nil {
		return nil, err
	}
	return countConn{wrapConn{conn}, c.n}, nil
}

func (c countConnector) Driver() driver.Driver { return wrapDriver{stdlib.GetDefaultDriver()} }

type countConn struct {
	wrapConn
	n *atomic.Int64
}

func (c countConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	c.n.Add(1)
	return c.wrapConn.QueryContext(ctx, q, args)
}

func (c countConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	c.n.Add(1)
	return c.wrapConn.ExecContext(ctx, q, args)
}

// idleGroups is one broker on a fake clock with a subscription per group.
type idleGroups struct {
	t     *testing.T
	b     *inbox.Broker
	clk   *clock.Fake
	poll  time.Duration
	subs  []*inbox.Subscription
	stops []func()
	got   chan Job
	sent  *atomic.Int64 // Postgres: statements sent through b's pool
}

const idlePoll = time.Second

func newIdleGroups(t *testing.T, url string, n int, h func(Job) error) *idleGroups {
	g := &idleGroups{t: t, clk: fake(), poll: idlePoll, got: make(chan Job, 100), sent: new(atomic.Int64)}
	opts := []inbox.Option{inbox.WithClock(g.clk), inbox.PollInterval(g.poll), inbox.WithHub(notify.NewHub())}
	if url[:9] == "sqlite://" {
		g.b = open(t, url, opts...)
	} else {
		db := sql.OpenDB(countConnector{url: url, n: g.sent})
		t.Cleanup(func() { db.Close() })
		db.SetMaxOpenConns(8)
		if err := migrations.Apply(context.Background(), db, "jobs"); err != nil {
			t.Fatal(err)
		}
		b, err := inbox.New(db, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		g.b = b
	}
	for i := range n {
		q := inbox.MustQueue[Job]("jobs").Group(fmt.Sprintf("g%d", i))
		sub, err := inbox.Subscribe(g.b, q, func(ctx context.Context, j Job) error {
			err := h(j)
			if err == nil {
				g.got <- j
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		g.subs = append(g.subs, sub)
		g.stops = append(g.stops, inboxtest.RunSubscription(t, sub))
	}
	g.idle()
	return g
}

// idle waits until every running subscription is idle, and returns their
// claims so far.
func (g *idleGroups) idle() (claims int64) {
	for i, s := range g.subs {
		if g.stops[i] != nil {
			ctx, cancel := context.WithTimeout(context.Background(), inboxtest.Timeout)
			err := s.WaitIdle(ctx)
			cancel()
			if err != nil {
				buf := make([]byte, 1<<20)
				g.t.Logf("goroutines:\n%s", buf[:runtime.Stack(buf, true)])
				g.t.Fatalf("group g%d not idle within %v: %v (stats %+v)", i, inboxtest.Timeout, err, s.Stats())
			}
		}
		claims += s.Stats().Claims
	}
	return claims
}

// tick moves the clock by d and waits for the polls it fires.
func (g *idleGroups) tick(d time.Duration) {
	g.clk.Advance(d)
	g.idle()
}

// handled waits for a row of group want, failing on one of another group.
func (g *idleGroups) handled(want string, how string) {
	g.t.Helper()
	select {
	case j := <-g.got:
		if j.Group != want {
			g.t.Fatalf("%s: a row of group %q was handled, want %q", how, j.Group, want)
		}
	case <-time.After(30 * time.Second):
		g.t.Fatalf("%s: the row of group %q was not handled within a poll interval (30 s of waiting)", how, want)
	}
}

func (g *idleGroups) exec(query string, args ...any) {
	g.t.Helper()
	if _, err := g.b.DB().Exec(query, args...); err != nil {
		g.t.Fatal(err)
	}
}

// 100 idle group subscriptions of one broker send no claims while idle:
// one statement a poll interval asks for all of them (on Postgres every
// statement through the pool is counted: at most two a poll), where each
// group used to claim once a poll interval (100 a poll).
func TestIdleGroupsShareOnePoll(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		g := newIdleGroups(t, url, 100, func(Job) error { return nil })
		c0, s0 := g.idle(), g.sent.Load()
		const polls = 10
		for range polls {
			g.tick(g.poll)
		}
		claims, sent := g.idle()-c0, g.sent.Load()-s0
		t.Logf("%d polls of 100 idle groups: %d claims, %d statements (Postgres; 0 counted on SQLite)", polls, claims, sent)
		if claims != 0 {
			t.Fatalf("100 idle groups sent %d claims over %d polls, want none (the poller asks for them)", claims, polls)
		}
		if sent > 2*polls {
			t.Fatalf("100 idle groups sent %d statements over %d polls, want at most %d", sent, polls, 2*polls)
		}
	})
}

// insertInto writes a row into group by plain SQL, held until at when at
// is set (as a dead claimer's lease leaves it).
func (g *idleGroups) insertInto(group string, at time.Time) {
	g.t.Helper()
	lu := "NULL"
	if !at.IsZero() {
		lu = "'" + at.UTC().Format("2006-01-02 15:04:05.000") + "'"
		if g.b.Dialect() == "postgres" {
			lu = "'" + at.UTC().Format("2006-01-02 15:04:05.000") + "+00'"
		}
	}
	g.exec(fmt.Sprintf("INSERT INTO jobs (group_name, payload, locked_until) VALUES ('%s', 'p', %s)", group, lu))
}

// none fails when a row was handled.
func (g *idleGroups) none(how string) {
	g.t.Helper()
	select {
	case j := <-g.got:
		g.t.Fatalf("%s: row %d of group %q handled too early", how, j.ID, j.Group)
	default:
	}
}

// Among 100 idle group subscriptions, a row that becomes available in any
// group is picked up within a poll interval, whichever way it became
// available: published (at once, the hub wakes it), inserted by plain SQL,
// published with a delay that comes due, retried after a failure, or left
// by a claimer whose lease ran out.
func TestIdleGroupsPickUpEveryWay(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		var failed atomic.Bool
		g := newIdleGroups(t, url, 100, func(j Job) error {
			if j.Group == "g21" && failed.CompareAndSwap(false, true) {
				return errors.New("first handling of g21 fails")
			}
			return nil
		})
		ctx := context.Background()
		q := inbox.MustQueue[Job]("jobs")

		if _, err := inbox.Publish(ctx, g.b, q.Group("g3"), Job{Payload: []byte("p")}); err != nil {
			t.Fatal(err)
		}
		g.handled("g3", "published")

		g.insertInto("g50", time.Time{})
		g.tick(g.poll)
		g.handled("g50", "inserted by plain SQL")

		if _, err := inbox.Publish(ctx, g.b, q.Group("g60"), Job{Payload: []byte("p")}, inbox.Delay(5*time.Second)); err != nil {
			t.Fatal(err)
		}
		g.tick(g.poll)
		g.none("delayed 5 s, 1 s passed")
		g.tick(5 * time.Second)
		g.handled("g60", "delayed publish come due")

		g.insertInto("g21", time.Time{})
		g.tick(g.poll) // claimed, fails, retried after at most a second
		g.none("the failed first handling")
		if !failed.Load() {
			t.Fatal("g21's row was not claimed within a poll")
		}
		g.tick(2 * time.Second)
		g.handled("g21", "retry come due")

		g.insertInto("g99", g.clk.Now().Add(3*time.Second))
		g.tick(g.poll)
		g.none("leased 3 s, 1 s passed")
		g.tick(3 * time.Second)
		g.handled("g99", "lease run out")
	})
}

// Stopping one group's subscription leaves the poller working for the
// others, and the stopped group's rows stay where they are.
func TestIdleGroupsStopOne(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		g := newIdleGroups(t, url, 10, func(Job) error { return nil })
		g.stops[4]()
		g.stops[4] = nil
		g.insertInto("g4", time.Time{})
		g.insertInto("g5", time.Time{})
		g.tick(g.poll)
		g.handled("g5", "a group beside a stopped one")
		g.tick(g.poll)
		g.none("the stopped group")
		var n int
		if err := g.b.DB().QueryRow("SELECT count(*) FROM jobs WHERE group_name = 'g4'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Fatalf("the stopped group's row: %d rows left, want 1", n)
		}
		// Every subscription stopped: the poller's goroutine ends (goleak in
		// TestMain checks).
		for i, stop := range g.stops {
			if stop != nil {
				stop()
				g.stops[i] = nil
			}
		}
	})
}

// A paused group among idle group subscriptions is not claimed: the poller
// finds its row and wakes it every poll, and its claims, gated by the
// pause, take nothing; the groups beside it are handled.
func TestIdleGroupsPausedGroupNotClaimed(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		ctx := context.Background()
		b := open(t, url, inbox.PollInterval(50*time.Millisecond), inbox.WithHub(notify.NewHub()))
		if err := migrations.ApplyRegistry(ctx, b.DB()); err != nil {
			t.Fatal(err)
		}
		if err := inbox.NewOperator(b).Pause(ctx, "jobs", "g1"); err != nil {
			t.Fatal(err)
		}
		svc := inbox.NewService("groups", "1", b)
		svc.Signals = false
		if err := svc.Register(inbox.RegistryHeartbeat(time.Minute)); err != nil {
			t.Fatal(err)
		}
		got := make(chan Job, 10)
		var subs []*inbox.Subscription
		for i := range 3 {
			sub, err := inbox.Handle(svc, inbox.MustQueue[Job]("jobs").Group(fmt.Sprintf("g%d", i)), func(ctx context.Context, j Job) error {
				got <- j
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			subs = append(subs, sub)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- svc.Run(rctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("service: %v", err)
			}
		})
		<-svc.Started()
		for _, s := range subs {
			inboxtest.Idle(t, s)
		}
		c1 := subs[1].Stats().Claims
		for _, grp := range []string{"g0", "g1", "g2"} {
			if _, err := b.DB().Exec(fmt.Sprintf("INSERT INTO jobs (group_name, payload) VALUES ('%s', 'p')", grp)); err != nil {
				t.Fatal(err)
			}
		}
		seen := map[string]bool{}
		for range 2 {
			select {
			case j := <-got:
				seen[j.Group] = true
			case <-time.After(30 * time.Second):
				t.Fatalf("rows of the unpaused groups not handled within 30 s (handled: %v)", seen)
			}
		}
		if !seen["g0"] || !seen["g2"] {
			t.Fatalf("handled %v, want g0 and g2", seen)
		}
		eventually(t, "the paused group woken by two polls", func() bool { return subs[1].Stats().Claims >= c1+2 })
		select {
		case j := <-got:
			t.Fatalf("row %d of the paused group %q handled", j.ID, j.Group)
		default:
		}
	})
}
