//go:build unix

package failovertest_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	mrand "math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sqlinbox/sqlinbox/claim/advisory"
	"github.com/sqlinbox/sqlinbox/claim/lease"
	"github.com/sqlinbox/sqlinbox/claim/rowlock"
	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/internal/claim"
	"github.com/sqlinbox/sqlinbox/migrations"
	"github.com/sqlinbox/sqlinbox/notify"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// urlEnv names both nodes of a pg_auto_failover cluster in one URL with
// target_session_attrs=read-write; .ci/failover start sets it, with
// FAILOVER_MONITOR_URL and FAILOVER_DIR.
const urlEnv = "FAILOVER_TEST_URL"

// Job is the reference table's row.
type Job struct {
	ID          int64          `db:"id" inbox:"id,generated"`
	LockedUntil *time.Time     `db:"locked_until" inbox:"locked_until"`
	Payload     []byte         `db:"payload" inbox:"payload"`
	Group       string         `db:"group_name" inbox:"group"`
	Attempts    int            `db:"attempts" inbox:"attempts"`
	LastError   sql.NullString `db:"last_error" inbox:"last_error"`
}

// resumeBound fails the test; the figures logged are what to read.
const resumeBound = 30 * time.Second

// A queue of each claim form, two instances of eight workers each, and a
// lock of one holder taken by two lockers, all on a pg_auto_failover
// cluster through its multi-host URL, while a producer publishes every 5 ms:
// the cluster switches over, then its primary is killed (SIGKILL of its
// pg_autoctl and Postgres) and the standby promoted. Every published row is
// handled, none by two handlings at once, the lock never has two holders,
// and each form resumes after each event; the resume times, from the new
// primary's first write to the first row acked after it, are logged.
func TestFailover(t *testing.T) {
	raw := os.Getenv(urlEnv)
	if raw == "" {
		t.Skipf("%s is not set: start a pg_auto_failover cluster with `eval \"$(.ci/failover start)\"` to run the failover test", urlEnv)
	}
	c := openCluster(t, raw)
	c.waitSettled(t)

	var drains []*drain
	for _, f := range []claim.Form{lease.Form, rowlock.Form, advisory.Form} {
		drains = append(drains, startDrain(t, raw, f))
	}
	lk := startLockers(t, raw)
	for _, d := range drains {
		d.waitAcked(t, 50)
	}
	lk.waitTakes(t, 20)
	tables := make([]string, len(drains))
	for i, d := range drains {
		tables[i] = d.table
	}

	type event struct {
		name     string
		writable time.Time
		resumed  map[string]time.Duration
	}
	var events []event
	// resume waits for every form and the lock to resume after the new
	// primary took writes.
	resume := func(name string, writable time.Time) {
		ev := event{name: name, writable: writable, resumed: map[string]time.Duration{}}
		for _, d := range drains {
			ev.resumed[d.form] = d.resumedAfter(t, writable)
		}
		ev.resumed["lock"] = lk.resumedAfter(t, writable)
		events = append(events, ev)
	}

	from, to := c.nodes(t)
	asked := time.Now()
	if _, err := c.monitor.Exec(context.Background(), "SELECT pgautofailover.perform_failover()"); err != nil {
		t.Fatalf("switchover: perform_failover on the monitor: %v", err)
	}
	writable := c.firstWrite(t, to, tables)
	t.Logf("switchover from %s to %s: the new primary took writes %v after the request", from.name, to.name, writable.Sub(asked).Round(time.Millisecond))
	resume("switchover", writable)

	c.waitSettled(t) // the old primary follows the new one
	from, to = c.nodes(t)
	killed := c.kill(t, from)
	writable = c.firstWrite(t, to, tables)
	t.Logf("%s killed: %s took writes %v after (the cluster's detection and promotion)", from.name, to.name, writable.Sub(killed).Round(time.Millisecond))
	resume("node killed", writable)

	for _, d := range drains {
		d.stopProducing()
	}
	lk.stop()
	for _, d := range drains {
		d.waitDrained(t)
	}

	t.Logf("%-8s | %-18s | %-18s | %s", "form", "switchover resume", "node-killed resume", "rows handled twice / rows")
	for _, d := range drains {
		twice, rows := d.check(t)
		t.Logf("%-8s | %-18v | %-18v | %d / %d", d.form, events[0].resumed[d.form].Round(time.Millisecond), events[1].resumed[d.form].Round(time.Millisecond), twice, rows)
	}
	t.Logf("%-8s | %-18v | %-18v | %d takes, at most %d holder(s) at once", "lock", events[0].resumed["lock"].Round(time.Millisecond), events[1].resumed["lock"].Round(time.Millisecond), lk.takes.Load(), lk.most.Load())
	if n := lk.most.Load(); n > 1 {
		t.Errorf("lock of MaxHolders 1 had %d holders at once", n)
	}
}

// drain is one form's queue: its table, a producer, and two instances of
// eight workers whose handlings one recorder sees.
type drain struct {
	form     string
	table    string
	producer *inbox.Broker
	rec      *inboxtest.Recorder[Job]

	mu        sync.Mutex
	published []int64
	refused   int // publishes that failed (their rows may or may not exist)
	stop      chan struct{}
	stopped   chan struct{}
}

func startDrain(t *testing.T, raw string, f claim.Form) *drain {
	t.Helper()
	var r [4]byte
	_, _ = rand.Read(r[:])
	d := &drain{form: f.Name(), table: "failover_" + f.Name() + "_" + hex.EncodeToString(r[:]),
		stop: make(chan struct{}), stopped: make(chan struct{})}
	// Each broker has a hub of its own, as if each ran in a process of its
	// own: a publish wakes no subscription, so claims resume on their own.
	d.producer = openBroker(t, raw, inbox.MaxConns(4), inbox.WithHub(notify.NewHub()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := migrations.Apply(ctx, d.producer.DB(), d.table); err != nil {
		t.Fatalf("create %s: %v", d.table, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := d.producer.DB().ExecContext(ctx, "DROP TABLE IF EXISTS "+d.table); err != nil {
			t.Logf("drop %s: %v", d.table, err)
		}
	})
	q := inbox.MustQueue[Job](d.table)
	d.rec = inboxtest.NewRecorder(t, d.producer, q)
	for _, instance := range []string{"a", "b"} {
		b := openBroker(t, raw, inbox.MaxConns(10), inbox.WithHub(notify.NewHub()))
		sub, err := inbox.Subscribe(b, q, d.rec.Wrap(instance, handle), inbox.Form(f), inbox.Workers(8), d.rec.Observe(instance))
		if err != nil {
			t.Fatalf("%s: subscribe: %v", d.form, err)
		}
		inboxtest.RunSubscription(t, sub)
	}
	go d.produce(q)
	t.Cleanup(d.stopProducing)
	return d
}

func openBroker(t *testing.T, raw string, opts ...inbox.Option) *inbox.Broker {
	t.Helper()
	b, err := inbox.Open(raw, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// handle takes 1-5 ms, and stops when its hold ends.
func handle(ctx context.Context, _ Job) error {
	timer := time.NewTimer(time.Duration(1+mrand.IntN(5)) * time.Millisecond)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// produce publishes a row every 5 ms until stopProducing, noting the ids of
// those whose publish succeeded. After a failed publish it waits 100 ms, as
// a producer that backs off would: one that retried at once would open a
// session on the standby every few ms (each refused as read-only only
// after it started), enough to make the monitor's health checks of the
// standby time out on a loaded machine, and the standby unfit to promote.
func (d *drain) produce(q inbox.Queue[Job]) {
	defer close(d.stopped)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		id, err := inbox.Publish(ctx, d.producer, q, Job{Payload: []byte("p")})
		cancel()
		d.mu.Lock()
		if err != nil {
			d.refused++
		} else {
			d.published = append(d.published, id)
		}
		d.mu.Unlock()
		if err != nil {
			pause := time.NewTimer(100 * time.Millisecond)
			select {
			case <-d.stop:
				pause.Stop()
				return
			case <-pause.C:
			}
		}
	}
}

func (d *drain) stopProducing() {
	select {
	case <-d.stop:
	default:
		close(d.stop)
	}
	<-d.stopped
}

// waitAcked waits until n handlings were acked.
func (d *drain) waitAcked(t *testing.T, n int) {
	t.Helper()
	waitFor(t, resumeBound, d.form+": rows acked at the start", func() bool {
		acked := 0
		for _, h := range d.rec.Handlings() {
			if h.Outcome == inbox.Acked {
				acked++
			}
		}
		return acked >= n
	})
}

// resumedAfter waits for the first handling that started after writable and
// was acked, and returns how long after writable it ended.
func (d *drain) resumedAfter(t *testing.T, writable time.Time) time.Duration {
	t.Helper()
	var resumed time.Duration
	waitFor(t, resumeBound, d.form+": a row acked after the new primary took writes", func() bool {
		hs := d.rec.Handlings()
		first := time.Time{}
		for i := len(hs) - 1; i >= 0 && hs[i].Start.After(writable); i-- {
			if h := hs[i]; h.Outcome == inbox.Acked && (first.IsZero() || h.End.Before(first)) {
				first = h.End
			}
		}
		resumed = first.Sub(writable)
		return !first.IsZero()
	})
	return resumed
}

// waitDrained waits until the table is empty: every row handled, those
// whose acknowledgement was lost with a node back and handled again.
func (d *drain) waitDrained(t *testing.T) {
	t.Helper()
	var left int
	waitFor(t, 2*time.Minute, d.form+": the table empty", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return d.producer.DB().QueryRowContext(ctx, "SELECT count(*) FROM "+d.table).Scan(&left) == nil && left == 0
	})
}

// check fails the test for a published row never handled, or a row held by
// two handlings at once, and returns how many rows were handled more than
// once and how many were handled.
func (d *drain) check(t *testing.T) (twice, rows int) {
	t.Helper()
	counts := map[int64]int{}
	for _, h := range d.rec.Handlings() {
		if h.Err == nil && !h.End.IsZero() {
			counts[h.ID]++
		}
	}
	d.mu.Lock()
	lost := 0
	for _, id := range d.published {
		if counts[id] == 0 {
			lost++
			if lost <= 10 {
				t.Errorf("%s: row %d was published and never handled", d.form, id)
			}
		}
	}
	refused := d.refused
	published := len(d.published)
	d.mu.Unlock()
	if lost > 0 {
		t.Errorf("%s: lost=%d of %d published rows", d.form, lost, published)
	}
	d.rec.NoOverlaps()
	for _, n := range d.rec.Counts() {
		if n > 1 {
			twice++
		}
	}
	t.Logf("%s: %d rows published (%d publishes failed during the outages), %d handled", d.form, published, refused, len(counts))
	return twice, len(counts)
}
