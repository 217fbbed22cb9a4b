package inbox_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/lock"
	"github.com/sqlinbox/sqlinbox/migrations"
	"github.com/sqlinbox/sqlinbox/schedule"
)

// A SQLite pool opened with sql.Open("sqlite", path) has no busy timeout:
// under contention its claims, acks and hooks fail with SQLITE_BUSY. New,
// lock.NewSQL and schedule.New refuse it, naming the setting and a DSN that
// has it; a pool opened with that DSN drains under contention from a second
// broker and a plain-SQL producer, every row handled once.
func TestUsersSQLitePool(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "jobs.db")
	bare, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	refused := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "busy_timeout") || !strings.Contains(err.Error(), "inbox.OpenDB") {
			t.Errorf("%s on a pool with no busy timeout: %v", what, err)
		}
	}
	_, err = inbox.New(bare)
	refused("inbox.New", err)
	_, err = lock.NewSQL(ctx, bare)
	refused("lock.NewSQL", err)
	_, err = schedule.New(bare)
	refused("schedule.New", err)

	var pools []*sql.DB
	for range 3 {
		db, err := sql.Open("sqlite", dialect.SQLiteFileDSN(path))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		pools = append(pools, db)
	}
	if err := migrations.Apply(ctx, pools[0], "jobs"); err != nil {
		t.Fatal(err)
	}
	if err := migrations.ApplyLocks(ctx, pools[0]); err != nil {
		t.Fatal(err)
	}
	if l, err := lock.NewSQL(ctx, pools[0]); err != nil {
		t.Errorf("lock.NewSQL on a pool with the DSN: %v", err)
	} else {
		l.Close() // its sweeper outlived the test (goleak)
	}
	if _, err := schedule.New(pools[0]); err != nil {
		t.Errorf("schedule.New on a pool with the DSN: %v", err)
	}
	const n = 300
	ev := inboxtest.NewEvents(t)
	for i := range 2 {
		b, err := inbox.New(pools[i])
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		sub, err := inbox.Subscribe(b, inbox.MustQueue[Job]("jobs"), func(context.Context, Job) error { return nil },
			inbox.Workers(4), ev.Observe())
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
	}
	var wg sync.WaitGroup
	for p := range 2 {
		wg.Go(func() {
			for i := range n / 2 {
				if _, err := pools[2].ExecContext(ctx, "INSERT INTO jobs (payload) VALUES ('c')"); err != nil {
					t.Errorf("producer %d, row %d: %v", p, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	ev.Wait("every row acked", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Acked) == n })
	seen := map[int64]int{}
	for _, e := range ev.All() {
		seen[e.ID]++
		if e.Outcome != inbox.Acked {
			t.Errorf("row %d: %v", e.ID, e.Outcome)
		}
	}
	for id, c := range seen {
		if c != 1 {
			t.Errorf("row %d handled %d times", id, c)
		}
	}
}
