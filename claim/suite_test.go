package claim_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/claim/advisory"
	"github.com/sqlinbox/sqlinbox/claim/lease"
	"github.com/sqlinbox/sqlinbox/claim/rowlock"
	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/internal/claim"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/internal/testdb"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// Job is a row of the reference inbox table.
type Job struct {
	ID          int64          `db:"id" inbox:"id,generated"`
	LockedUntil *time.Time     `db:"locked_until" inbox:"locked_until"`
	Payload     []byte         `db:"payload" inbox:"payload"`
	Attempts    int            `db:"attempts" inbox:"attempts"`
	LastError   sql.NullString `db:"last_error" inbox:"last_error"`
}

const (
	sqlite   = "sqlite"
	postgres = "postgres"
	mysql    = "mysql"
	// mysql8 is MariaDB taken for MySQL 8 (testdb.MySQL8): the statements
	// MySQL 8 runs, which return no rows from INSERT or DELETE.
	mysql8 = "mysql8"
)

// onMySQL says kind is MariaDB, as itself or taken for MySQL 8.
func onMySQL(kind string) bool { return kind == mysql || kind == mysql8 }

// The forms and the databases each serves: every case below runs on each.
// "lease without blocks" is the lease form on a Postgres table whose block
// sequence (migrations.ApplyClaimBlocks) was dropped.
var forms = []formCase{
	{lease.Form, []string{sqlite, postgres, mysql, mysql8}, false, false},
	{lease.Form, []string{postgres}, true, false},
	{rowlock.Form, []string{postgres, mysql, mysql8}, false, false},
	{advisory.Form, []string{postgres, mysql}, false, false},
	// FairBy over the group column, whose rows the setup spreads over
	// seven values.
	{lease.Form, []string{sqlite, postgres, mysql}, false, true},
	{rowlock.Form, []string{postgres, mysql}, false, true},
	{advisory.Form, []string{postgres, mysql}, false, true},
}

type formCase struct {
	form     claim.Form
	dbs      []string
	noBlocks bool
	fair     bool
}

func (fc formCase) name() string {
	switch {
	case fc.noBlocks:
		return fc.form.Name() + " without blocks"
	case fc.fair:
		return fc.form.Name() + " fair"
	}
	return fc.form.Name()
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// TestForms is the conformance suite: every form, on every database it
// serves. The cases of one form and database run one after the other, so a
// run holds few Postgres connections at a time.
func TestForms(t *testing.T) {
	for _, fc := range forms {
		t.Run(fc.name(), func(t *testing.T) {
			t.Parallel()
			for _, kind := range fc.dbs {
				t.Run(kind, func(t *testing.T) {
					t.Parallel()
					s := suite{form: fc.form, kind: kind, noBlocks: fc.noBlocks, fair: fc.fair}
					t.Run("many instances", s.manyInstances)
					t.Run("killed holder", s.killedHolder)
					t.Run("pool cap", s.poolCap)
					t.Run("delayed rows", s.delayedRows)
				})
			}
		})
	}
}

type suite struct {
	form     claim.Form
	kind     string
	noBlocks bool // the table's block sequence is dropped
	fair     bool // subscriptions share claims between groups (FairBy)
}

// with is a subscription's options, FairBy("group_name") added where the
// suite runs fair.
func (s suite) with(opts ...inbox.SubOption) []inbox.SubOption {
	if s.fair {
		return append(opts, inbox.FairBy("group_name"))
	}
	return opts
}

// spreadGroups makes every row inserted into table take one of seven
// groups, whatever inserts it.
func spreadGroups(t *testing.T, ctx context.Context, db *sql.DB, kind, table string) {
	t.Helper()
	q := map[string]string{
		postgres: fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN group_name SET DEFAULT 'g' || floor(random() * 7)::int`, table),
		mysql:    fmt.Sprintf("ALTER TABLE `%s` ALTER COLUMN group_name SET DEFAULT (CONCAT('g', FLOOR(RAND() * 7)))", table),
		sqlite:   fmt.Sprintf(`CREATE TRIGGER %[1]s_spread AFTER INSERT ON %[1]s BEGIN UPDATE %[1]s SET group_name = 'g' || (NEW.id %% 7) WHERE id = NEW.id; END`, table),
	}[kind]
	if _, err := db.ExecContext(ctx, q); err != nil {
		t.Fatalf("spread the groups of %s: %v", table, err)
	}
}

// fixture is a fresh database with an inbox table of a name of its own (so
// the advisory lock class of one test is not another's), and a pool of the
// test's own, as a producer has.
type fixture struct {
	d     *dialect.Dialect
	url   string
	table string
	db    *sql.DB
	queue inbox.Queue[Job]
}

func (s suite) setup(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{table: "jobs_" + random()}
	switch s.kind {
	case sqlite:
		f.url = inboxtest.SQLite(t)
	case mysql:
		f.url = inboxtest.MySQL(t)
	case mysql8:
		f.url = testdb.MySQL8(t, 1)
	default:
		f.url = inboxtest.Postgres(t)
	}
	f.db = inboxtest.Open(t, f.url)
	f.d = dialect.Of(map[string]dialect.Kind{sqlite: dialect.SQLite, postgres: dialect.Postgres, mysql: dialect.MySQL, mysql8: dialect.MySQL}[s.kind])
	f.db.SetMaxOpenConns(2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := migrations.Apply(ctx, f.db, f.table); err != nil {
		t.Fatal(err)
	}
	if s.noBlocks {
		if _, err := f.db.ExecContext(ctx, "DROP SEQUENCE "+dialect.BlockSequenceName(f.table)); err != nil {
			t.Fatal(err)
		}
	}
	if s.fair {
		spreadGroups(t, ctx, f.db, s.kind, f.table)
	}
	f.queue = inbox.MustQueue[Job](f.table)
	return f
}

func random() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// broker opens an instance of its own: a pool of its own, closed at cleanup.
func (f *fixture) broker(t *testing.T, url string, opts ...inbox.Option) *inbox.Broker {
	t.Helper()
	b, err := inbox.Open(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// insert writes n rows by plain SQL in one transaction, as a producer
// would, and returns their ids.
func (f *fixture) insert(t *testing.T, n int) []int64 {
	t.Helper()
	tx, err := f.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	ids := make([]int64, 0, n)
	q := fmt.Sprintf("INSERT INTO %s (payload) VALUES ('p') RETURNING id", f.d.Quote(f.table))
	for range n {
		var id int64
		if err := tx.QueryRow(q).Scan(&id); err != nil {
			t.Fatalf("insert into %s: %v", f.table, err)
		}
		ids = append(ids, id)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return ids
}

func (f *fixture) count(t *testing.T) int {
	t.Helper()
	var n int
	if err := f.db.QueryRow("SELECT count(*) FROM " + f.d.Quote(f.table)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// ticketed says whether a claim took a block from the table's block
// sequence.
func (f *fixture) ticketed(t *testing.T) bool {
	t.Helper()
	var called bool
	if err := f.db.QueryRow("SELECT is_called FROM " + dialect.BlockSequenceName(f.table)).Scan(&called); err != nil {
		t.Fatal(err)
	}
	return called
}

// advisoryLocks counts the advisory locks of the table's class that any
// session of the database holds.
func (f *fixture) advisoryLocks(t *testing.T) int {
	t.Helper()
	if f.d.Kind == dialect.MySQL {
		return userLocks(t, f.db, f.table)
	}
	var n int
	err := f.db.QueryRow(`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = $1::int::oid
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`, advisory.Class(f.table)).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// run runs sub until the test ends, failing the test if Run returns an
// error; stop stops it and waits.
// events collects Observe events and lets a test wait on them.
// wait blocks until cond holds over the events seen, or fails the test.
// handlings records each handling's start and end per id, and catches two
// holders of one row at once as it happens.
type handlings struct {
	mu       sync.Mutex
	inWork   map[int64]int // handlers running per id
	spans    map[int64][][2]time.Time
	overlaps []string
}

func newHandlings() *handlings {
	return &handlings{inWork: map[int64]int{}, spans: map[int64][][2]time.Time{}}
}

func (h *handlings) start(id int64) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.inWork[id]++
	if h.inWork[id] > 1 {
		h.overlaps = append(h.overlaps, fmt.Sprintf("row %d: %d handlers at once", id, h.inWork[id]))
	}
	return time.Now()
}

func (h *handlings) end(id int64, start time.Time) {
	end := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.inWork[id]--
	h.spans[id] = append(h.spans[id], [2]time.Time{start, end})
}

// check fails the test for any two handlings of one row that overlap in
// time.
func (h *handlings) check(t *testing.T) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, o := range h.overlaps {
		t.Error(o)
	}
	for id, spans := range h.spans {
		sort.Slice(spans, func(i, j int) bool { return spans[i][0].Before(spans[j][0]) })
		for i := 1; i < len(spans); i++ {
			if spans[i][0].Before(spans[i-1][1]) {
				t.Errorf("row %d: handling %d started at %v, before handling %d ended at %v",
					id, i+1, spans[i][0].Format(time.StampMicro), i, spans[i-1][1].Format(time.StampMicro))
			}
		}
	}
}

// manyInstances runs three instances of four workers on one table while a
// producer inserts: every row is handled, never by two holders at once,
// and none is left behind. One row in 97 fails its first attempt, so
// retries run through the form too.
func (s suite) manyInstances(t *testing.T) {
	f := s.setup(t)
	const instances, workers = 3, 4
	total := 3000
	if s.kind == sqlite {
		total = 600
	}
	failsOnce := func(id int64) bool { return id%97 == 0 }
	h := newHandlings()
	ev := inboxtest.NewEvents(t)
	// The first handling fails, told by the test, not by j.Attempts: the
	// attempt is counted at the claim, and a row-lock claim whose two steps
	// outlived their hold gap on a loaded machine counts one that no
	// handler ran (the row then came back with attempts 2, was acked at its
	// first handling, and the wait for its retry never ended).
	var failed sync.Map
	handler := func(ctx context.Context, j Job) error {
		start := h.start(j.ID)
		defer h.end(j.ID, start)
		if _, again := failed.LoadOrStore(j.ID, true); failsOnce(j.ID) && !again {
			return inbox.RetryAfter(time.Millisecond, errors.New("the first handling fails"))
		}
		return nil
	}
	ids := f.insert(t, total/2)
	var brokers []*inbox.Broker
	for i := range instances {
		b := f.broker(t, f.url, inbox.MaxConns(workers+2), inbox.PollInterval(50*time.Millisecond))
		sub, err := inbox.Subscribe(b, f.queue, handler, s.with(inbox.Form(s.form), inbox.Workers(workers),
			ev.Observe(), inbox.Name(fmt.Sprintf("instance %d", i)))...)
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
		brokers = append(brokers, b)
	}
	for len(ids) < total {
		ids = append(ids, f.insert(t, min(100, total-len(ids)))...)
		brokers[len(ids)%instances].Wake(f.table, "")
	}
	acked := func(evs []inbox.Event) map[int64]int {
		m := map[int64]int{}
		for _, e := range evs {
			if e.Outcome == inbox.Acked {
				m[e.ID]++
			}
		}
		return m
	}
	wantRetried := 0
	for _, id := range ids {
		if failsOnce(id) {
			wantRetried++
		}
	}
	// The retry of a row is told once its statement returns, and by then
	// another instance may have claimed, handled and acked the row: wait
	// for the retries too, not only the acks.
	all := ev.WaitFor(3*time.Minute, fmt.Sprintf("%d rows acked and %d retried", total, wantRetried), func(evs []inbox.Event) bool {
		return len(acked(evs)) >= total && inboxtest.Count(evs, inbox.Retried) >= wantRetried
	})
	h.check(t)
	got := acked(all)
	retried := 0
	for _, e := range all {
		switch e.Outcome {
		case inbox.Acked:
		case inbox.Retried:
			retried++
			if !failsOnce(e.ID) {
				t.Errorf("row %d retried, but its handler never fails", e.ID)
			}
		default:
			t.Errorf("row %d: outcome %s (%v)", e.ID, e.Outcome, e.Err)
		}
	}
	for _, id := range ids {
		if got[id] != 1 {
			t.Errorf("row %d acked %d times, want once", id, got[id])
		}
		if failsOnce(id) {
			if n := len(h.spans[id]); n != 2 {
				t.Errorf("row %d, which fails once, handled %d times, want 2", id, n)
			}
		}
	}
	if len(got) != total || retried != wantRetried {
		t.Errorf("%d rows acked and %d retried, want %d and %d", len(got), retried, total, wantRetried)
	}
	if n := f.count(t); n != 0 {
		t.Errorf("%d rows left behind in %s", n, f.table)
	}
	if s.form == advisory.Form {
		if n := f.advisoryLocks(t); n != 0 {
			t.Errorf("%d advisory locks of class %d (table %s) held after the run, want none", n, advisory.Class(f.table), f.table)
		}
	}
	if s.kind == postgres && s.form == lease.Form && !s.noBlocks && !s.fair && !f.ticketed(t) {
		t.Error("the claims took no block from the table's block sequence")
	}
	t.Logf("%s on %s: %d rows by %d instances x %d workers, %d retried", s.form.Name(), s.kind, total, instances, workers, retried)
}

// poolCap runs Workers(8) on a pool of 4 with handlers that block: the
// subscription never holds more than 3 connections (the pool's own count),
// and runs as many jobs at once as its form can within them.
func (s suite) poolCap(t *testing.T) {
	f := s.setup(t)
	const pool, workers, rows = 4, 8, 20
	atOnce := workers // lease holds no connection; advisory shares one per claim
	if s.form == rowlock.Form {
		atOnce = pool - 1 // one connection per job in work
	}
	most := atOnce
	if s.fair && s.form == advisory.Form {
		// One pinned connection for each group a claim took rows of: as
		// many jobs at once as the rows of pool-1 groups, at least one each.
		atOnce = pool - 1
	}
	f.insert(t, rows)
	b := f.broker(t, f.url, inbox.MaxConns(pool), inbox.PollInterval(50*time.Millisecond))

	var maxInUse atomic.Int64
	sample := func() {
		n := int64(b.DB().Stats().InUse)
		for {
			m := maxInUse.Load()
			if n <= m || maxInUse.CompareAndSwap(m, n) {
				return
			}
		}
	}
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-tick.C:
				sample()
			}
		}
	}()

	var (
		running, maxRunning atomic.Int64
		started             = make(chan struct{}, rows)
		release             = make(chan struct{})
	)
	ev := inboxtest.NewEvents(t)
	sub, err := inbox.Subscribe(b, f.queue, func(ctx context.Context, j Job) error {
		n := running.Add(1)
		defer running.Add(-1)
		for m := maxRunning.Load(); n > m && !maxRunning.CompareAndSwap(m, n); m = maxRunning.Load() {
		}
		sample()
		started <- struct{}{}
		<-release
		return nil
	}, s.with(inbox.Form(s.form), inbox.Workers(workers), ev.Observe())...)
	if err != nil {
		t.Fatal(err)
	}
	inboxtest.RunSubscription(t, sub)
	for i := range atOnce {
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			t.Fatalf("%d jobs started, want %d at once (Workers(%d) on a pool of %d)", i, atOnce, workers, pool)
		}
	}
	sample()
	inUse, inWork := b.DB().Stats().InUse, maxInUse.Load()
	close(release)
	ev.WaitFor(time.Minute, "every row acked", func(evs []inbox.Event) bool { return len(evs) >= rows })
	close(stopSampling)
	<-sampled
	if inUse > pool-1 || inWork > pool-1 {
		t.Errorf("the pool had %d connections in use with %d jobs in work (at most %d before they were let go); want at most %d",
			inUse, atOnce, inWork, pool-1)
	}
	// The lock forms settle on the connections they hold, so the cap holds
	// through the acks too. A lease ack takes a connection of the pool, as
	// a publish does: a burst of them may use the one left over.
	if s.form != lease.Form && maxInUse.Load() > pool-1 {
		t.Errorf("the pool had %d connections in use over the run, want at most %d", maxInUse.Load(), pool-1)
	}
	if m := maxRunning.Load(); m < int64(atOnce) || m > int64(most) {
		t.Errorf("at most %d jobs ran at once, want %d to %d", m, atOnce, most)
	}
	for _, e := range ev.All() {
		if e.Outcome != inbox.Acked {
			t.Errorf("row %d: %s (%v)", e.ID, e.Outcome, e.Err)
		}
	}
	if n := f.count(t); n != 0 {
		t.Errorf("%d rows left, want none", n)
	}
	t.Logf("%s on %s: %d jobs at once, at most %d of %d connections in use while they ran, %d over the run",
		s.form.Name(), s.kind, maxRunning.Load(), inWork, pool, maxInUse.Load())
}

// delayedRows: a row whose locked_until lies ahead is not claimed before
// its time, and is claimed once the time comes.
func (s suite) delayedRows(t *testing.T) {
	f := s.setup(t)
	clk := clock.NewFake(epoch)
	at := epoch.Add(time.Hour)
	var arg any = at
	if s.kind == sqlite {
		arg = at.Format(dialect.TextLayout)
	}
	var delayed int64
	q := f.d.Rebind(fmt.Sprintf("INSERT INTO %s (payload, locked_until) VALUES ('later', $1) RETURNING id", f.d.Quote(f.table)))
	if err := f.db.QueryRow(q, arg).Scan(&delayed); err != nil {
		t.Fatal(err)
	}
	now := f.insert(t, 1)[0]
	b := f.broker(t, f.url, inbox.WithClock(clk), inbox.PollInterval(time.Minute), inbox.MaxConns(3))
	ev := inboxtest.NewEvents(t)
	sub, err := inbox.Subscribe(b, f.queue, func(context.Context, Job) error { return nil },
		s.with(inbox.Form(s.form), inbox.Workers(2), ev.Observe())...)
	if err != nil {
		t.Fatal(err)
	}
	inboxtest.RunSubscription(t, sub)
	ev.WaitFor(30*time.Second, "the available row acked", func(evs []inbox.Event) bool { return len(evs) > 0 })
	inboxtest.Idle(t, sub)
	if evs := ev.All(); len(evs) != 1 || evs[0].ID != now {
		t.Fatalf("handled before the delayed row's time: %+v, want only row %d", evs, now)
	}
	clk.Advance(time.Hour + time.Minute) // past the row's time, and the poll
	evs := ev.WaitFor(30*time.Second, "the delayed row acked at its time", func(evs []inbox.Event) bool { return len(evs) > 1 })
	if len(evs) != 2 || evs[1].ID != delayed || evs[1].Outcome != inbox.Acked {
		t.Errorf("handlings %+v, want row %d then the delayed row %d", evs, now, delayed)
	}
	if s.form == advisory.Form {
		if n := f.advisoryLocks(t); n != 0 {
			t.Errorf("%d advisory locks of the table's class held, want none", n)
		}
	}
}
