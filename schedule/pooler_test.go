package schedule_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/internal/testdb"
	"github.com/sqlinbox/sqlinbox/migrations"
	"github.com/sqlinbox/sqlinbox/schedule"
)

// Behind PgBouncer in transaction mode, on pools the library opens, two
// instances run a schedule placed on every instance: each moment runs on
// both, each run knowing its share. A pool with pgx's statement cache is
// refused at Start by name.
func TestBehindTransactionPooling(t *testing.T) {
	u := testdb.PgBouncer(t, testdb.PgBouncerTxEnv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := "pgb_" + testdb.UniqueName(t)
	var mu sync.Mutex
	runs := map[time.Time][]int{} // fire time -> the instance index of each run
	both := make(chan time.Time, 8)
	for _, instance := range []string{name + "_a", name + "_b"} {
		db, _, err := dialect.Open(u)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if err := migrations.ApplySchedules(ctx, db); err != nil {
			t.Fatal(err)
		}
		s, err := schedule.New(db, schedule.Instance(instance), schedule.HeartbeatEvery(200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		err = s.Add(name, schedule.Every(time.Second), schedule.EveryInstance, func(_ context.Context, r schedule.Run) error {
			mu.Lock()
			defer mu.Unlock()
			runs[r.FiredAt] = append(runs[r.FiredAt], r.Instance)
			if len(runs[r.FiredAt]) == 2 && r.Instances == 2 {
				both <- r.FiredAt
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer s.Stop(context.Background())
	}
	select {
	case at := <-both:
		mu.Lock()
		got := runs[at]
		mu.Unlock()
		if got[0] == got[1] {
			t.Fatalf("both runs of %v have instance index %d", at, got[0])
		}
	case <-ctx.Done():
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("no moment ran on both instances within a minute: %v", runs)
	}

	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	cached := stdlib.OpenDBFromPool(pool)
	defer cached.Close()
	s, err := schedule.New(cached, schedule.Instance(name+"_c"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); !errors.Is(err, dialect.ErrTransactionPooling) {
		s.Stop(ctx)
		t.Fatalf("Start on a pool with pgx's statement cache behind transaction pooling: %v", err)
	}
}
