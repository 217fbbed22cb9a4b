package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
)

// insertMany writes n rows in one statement.
func insertMany(t *testing.T, db *sql.DB, n int) {
	t.Helper()
	q := fmt.Sprintf("WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM s WHERE i < %d) INSERT INTO jobs (payload) SELECT 'p' FROM s", n)
	if _, isMySQL := db.Driver().(*mysql.MySQLDriver); isMySQL {
		// MySQL takes the WITH after INSERT, as part of its SELECT.
		q = fmt.Sprintf("INSERT INTO jobs (payload) WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM s WHERE i < %d) SELECT 'p' FROM s", n)
	}
	if _, err := db.Exec(q); err != nil {
		t.Fatalf("insert %d rows: %v", n, err)
	}
}

// Two instances of few workers drain a backlog: on Postgres and MySQL their claims
// take more rows than their workers (spare rows, queued in the process),
// and still every row is handled exactly once; SQLite keeps a claim to
// its free workers.
func TestSpareRowsHandledOnce(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		const n, workers = 1000, 4
		b1 := open(t, url, inbox.PollInterval(50*time.Millisecond))
		b2, err := inbox.Open(url, inbox.PollInterval(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b2.Close() })
		insertMany(t, b1.DB(), n)
		var mu sync.Mutex
		seen := map[int64]int{}
		handle := func(ctx context.Context, j Job) error {
			mu.Lock()
			seen[j.ID]++
			mu.Unlock()
			return nil
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		defer func() { cancel(); wg.Wait() }()
		var subs []*inbox.Subscription
		for _, b := range []*inbox.Broker{b1, b2} {
			sub, err := inbox.Subscribe(b, inbox.MustQueue[Job]("jobs"), handle, inbox.Workers(workers))
			if err != nil {
				t.Fatal(err)
			}
			subs = append(subs, sub)
			wg.Add(1)
			go func() { defer wg.Done(); sub.Run(ctx) }()
		}
		eventually(t, "every row acked", func() bool { return rows(t, b1.DB()) == 0 })
		cancel()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for id, c := range seen {
			if c != 1 {
				t.Errorf("row %d handled %d times", id, c)
			}
		}
		if len(seen) != n {
			t.Fatalf("%d rows handled, want %d", len(seen), n)
		}
		most := 0.0
		for i, sub := range subs {
			st := sub.Stats()
			perClaim := float64(st.Claimed) / float64(max(st.Claims, 1))
			t.Logf("instance %d: %d rows in %d claims (%.1f a claim), %d released", i, st.Claimed, st.Claims, perClaim, st.Released)
			most = max(most, perClaim)
		}
		// Postgres and MySQL take writes side by side: their claims take
		// spare rows. SQLite's one writer does not.
		server := !strings.HasPrefix(url, "sqlite")
		switch {
		case server && most <= workers:
			t.Fatalf("at most %.1f rows a claim on %s with %d workers: no claim took spare rows", most, url[:strings.Index(url, ":")], workers)
		case !server && most > workers:
			t.Fatalf("%.1f rows a claim on SQLite with %d workers: a claim took more rows than its free workers", most, workers)
		}
	})
}

// blockAfterSpare returns a handler that handles rows at once until at
// least 100 are handled and 5 spare rows wait (claimed, not started), then
// blocks every handler it starts until gate closes, sending on blocked
// as each blocks.
func blockAfterSpare(sub *atomic.Pointer[inbox.Subscription], gate <-chan struct{}, blocked chan<- int64, started *atomic.Int64) inbox.Handler[Job] {
	var blocking atomic.Bool
	return func(ctx context.Context, j Job) error {
		s := started.Add(1)
		if !blocking.Load() {
			if s < 100 || sub.Load() == nil || sub.Load().Stats().Claimed-s < 5 {
				return nil
			}
			blocking.Store(true)
		}
		select {
		case blocked <- j.ID:
		default: // only the first few are waited for
		}
		<-gate
		return nil
	}
}

// At the stop, spare rows (claimed beyond the free workers, not started)
// are given back at once, not left to their lease (ten minutes here),
// while the handlers still running keep theirs.
func TestSpareRowsGivenBackAtStop(t *testing.T) {
	b := open(t, inboxtest.Postgres(t), inbox.PollInterval(time.Hour))
	insertMany(t, b.DB(), 3000)
	gate, blocked := make(chan struct{}), make(chan int64, 4)
	var open sync.Once
	var started atomic.Int64
	var subp atomic.Pointer[inbox.Subscription]
	ev := inboxtest.NewEvents(t)
	sub, err := inbox.Subscribe(b, inbox.MustQueue[Job]("jobs"), blockAfterSpare(&subp, gate, blocked, &started),
		inbox.Workers(4), inbox.Lease(10*time.Minute), inbox.ShutdownTimeout(time.Minute), ev.Observe())
	if err != nil {
		t.Fatal(err)
	}
	subp.Store(sub)
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- sub.Run(ctx) }()
	stopped := false
	defer func() {
		cancel()
		open.Do(func() { close(gate) })
		if !stopped {
			<-runDone
		}
	}()
	receiveN(t, blocked, 4, "handlers blocked")
	cancel()
	leased := func() int {
		var n int
		if err := b.DB().QueryRow("SELECT count(*) FROM jobs WHERE locked_until > now()").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// The four blocked handlers' rows stay leased; every other row is free
	// again before they return.
	eventually(t, "spare rows given back", func() bool { return leased() == 4 })
	// Every claimed row is acked, given back, or one of the four in work.
	var st inbox.Stats
	eventually(t, "the counts to settle", func() bool {
		st = sub.Stats()
		return st.Claimed == st.Acked+st.Released+4
	})
	t.Logf("at the stop: %d claimed, %d acked, %d released, 4 in work", st.Claimed, st.Acked, st.Released)
	if st.Released < 1 {
		t.Fatalf("released %d rows at the stop: the handlers blocked with spare rows waiting, none was given back", st.Released)
	}
	if got := inboxtest.Count(ev.All(), inbox.Released); int64(got) != st.Released {
		t.Fatalf("%d released events observed, Stats.Released %d", got, st.Released)
	}
	open.Do(func() { close(gate) })
	stopped = true
	if err := <-runDone; err != nil {
		t.Fatal(err)
	}
	if want := 3000 - int(st.Acked) - 4; rows(t, b.DB()) != want {
		t.Fatalf("%d rows left, want %d (the blocked four acked at their end)", rows(t, b.DB()), want)
	}
}

// A spare row that waited for a worker until its lease neared its end
// (its extension would be due) is given back, not started: its lease is
// not relied on past that point. Every row is still handled once: a row
// given back is claimed again.
func TestSpareRowNearItsLeaseEndGivenBack(t *testing.T) {
	clk := fake()
	b := open(t, inboxtest.Postgres(t), inbox.WithClock(clk), inbox.PollInterval(time.Second))
	const n = 400
	insertMany(t, b.DB(), n)
	gate, blocked := make(chan struct{}), make(chan int64, 2)
	var open sync.Once
	var started atomic.Int64
	var subp atomic.Pointer[inbox.Subscription]
	var mu sync.Mutex
	seen := map[int64]int{}
	block := blockAfterSpare(&subp, gate, blocked, &started)
	handle := func(ctx context.Context, j Job) error {
		mu.Lock()
		seen[j.ID]++
		mu.Unlock()
		return block(ctx, j)
	}
	sub, err := inbox.Subscribe(b, inbox.MustQueue[Job]("jobs"), handle, inbox.Workers(2), inbox.Lease(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	subp.Store(sub)
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- sub.Run(ctx) }()
	defer func() { cancel(); open.Do(func() { close(gate) }); <-runDone }()
	receiveN(t, blocked, 2, "handlers blocked")
	before := sub.Stats()
	clk.Advance(21 * time.Second) // past two thirds of the lease
	open.Do(func() { close(gate) })
	eventually(t, "every row acked", func() bool {
		if rows(t, b.DB()) == 0 {
			return true
		}
		// A row given back behind where the claims walk (claim.Mark) is
		// found at the next poll, as a retry come due is: with nothing in
		// work, the poll is moved to.
		if st := sub.Stats(); st.Claimed == st.Acked+st.Released {
			clk.Advance(time.Second)
		}
		return false
	})
	// The rows are gone once their acks commit; the acks are counted just
	// after.
	var st inbox.Stats
	eventually(t, "the counts to settle", func() bool {
		st = sub.Stats()
		return st.Claimed == st.Acked+st.Released
	})
	t.Logf("when the handler blocked: %d claimed, %d acked; at the end: released %d, claimed %d, acked %d", before.Claimed, before.Acked, st.Released, st.Claimed, st.Acked)
	if st.Released < 1 {
		t.Fatalf("no spare row given back after its lease neared its end (%d claimed, %d acked when the handler blocked)", before.Claimed, before.Acked)
	}
	mu.Lock()
	defer mu.Unlock()
	for id, c := range seen {
		if c != 1 {
			t.Errorf("row %d handled %d times", id, c)
		}
	}
	if len(seen) != n || st.Acked != n {
		t.Fatalf("%d rows handled, %d acked, want %d", len(seen), st.Acked, n)
	}
}

// Spare rows do not start once their queue is paused: a worker that
// finishes gives them back instead, so a pause stops handlers from
// starting as it did when claims took only rows for free workers.
func TestSpareRowsGivenBackWhenPaused(t *testing.T) {
	ctx := context.Background()
	url := inboxtest.Postgres(t)
	b := open(t, url, inbox.PollInterval(50*time.Millisecond))
	insertMany(t, b.DB(), 3000)
	gate, blocked := make(chan struct{}), make(chan int64, 4)
	var open sync.Once
	defer open.Do(func() { close(gate) })
	var started atomic.Int64
	var subp atomic.Pointer[inbox.Subscription]
	ev := inboxtest.NewEvents(t)
	svc, sub, stop := registered(t, b, 50*time.Millisecond, blockAfterSpare(&subp, gate, blocked, &started),
		inbox.Workers(4), inbox.Lease(10*time.Minute), ev.Observe())
	defer stop()
	subp.Store(sub)
	receiveN(t, blocked, 4, "handlers blocked")
	at := sub.Stats()
	if err := inbox.NewOperator(b).Pause(ctx, "jobs", ""); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pause seen", func() bool { return svc.Paused("jobs", "") })
	startedAtPause := started.Load()
	open.Do(func() { close(gate) })
	var st inbox.Stats
	eventually(t, "every started row acked, every other given back", func() bool {
		st = sub.Stats()
		return st.Acked == started.Load() && st.Claimed == st.Acked+st.Released
	})
	t.Logf("paused with about %d spare rows: released %d", at.Claimed-at.Acked-4, st.Released)
	if st.Released < 1 {
		t.Fatalf("no spare row given back (%+v at the pause, %+v now)", at, st)
	}
	if n := started.Load(); n != startedAtPause {
		t.Fatalf("%d handlers started after the pause was seen", n-startedAtPause)
	}
	if n := rows(t, b.DB()); n != 3000-int(st.Acked) {
		t.Fatalf("%d rows left, want %d", n, 3000-int(st.Acked))
	}
}
