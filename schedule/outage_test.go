package schedule_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/testdb"
	"github.com/sqlinbox/sqlinbox/migrations"
	"github.com/sqlinbox/sqlinbox/schedule"
)

// Two instances run a schedule placed on every instance; a reaches
// Postgres through a proxy. a's run of a moment returns just after every
// connection of a was cut and new ones refused (a failover's shape): its
// done fails, and is sent again while the share's lease (6 s) lasts. The
// database comes back 1.5 s later; the done lands, so the share is never an
// orphan for b to take over and run again: no share of any moment runs
// twice.
func TestShareDoneSentAgainAfterAnOutage(t *testing.T) {
	url := postgresURL(t)
	p, via := testdb.NewProxy(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	direct := openURL(t, url)
	if err := migrations.ApplySchedules(ctx, direct); err != nil {
		t.Fatal(err)
	}
	log := &syncBuffer{}
	type share struct {
		at     time.Time
		worker int
	}
	var mu sync.Mutex
	runs := map[share][]string{} // the instances that ran each share
	held, cut := make(chan schedule.Run, 1), make(chan struct{})
	var once sync.Once
	for _, name := range []string{"a", "b"} {
		db := direct
		if name == "a" {
			db = openURL(t, via)
		}
		s, err := schedule.New(db, schedule.Instance(name), schedule.HeartbeatEvery(6*time.Second), schedule.WithLogger(slogTo(log)))
		if err != nil {
			t.Fatal(err)
		}
		err = s.Add("tick", schedule.Every(time.Second), schedule.EveryInstance, func(_ context.Context, r schedule.Run) error {
			mu.Lock()
			k := share{r.FiredAt, r.Worker}
			runs[k] = append(runs[k], r.InstanceName)
			mu.Unlock()
			if r.InstanceName == "a" && r.Instances == 2 {
				once.Do(func() {
					held <- r
					<-cut
				})
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Stop(context.Background()) })
	}
	var r schedule.Run
	select {
	case r = <-held:
	case <-ctx.Done():
		t.Fatalf("a ran no moment shared with b within %v\n%s", wait, log)
	}

	p.Cut()
	close(cut)
	waitLog(t, log, "could not mark a share done; sent again while its lease lasts")
	time.Sleep(1500 * time.Millisecond) // the outage (a wait on time is the point)
	p.Restore()
	back := time.Now()
	waitLog(t, log, "a share's done sent again landed")
	t.Logf("the share's done landed %v after the database came back (lease 6s)", time.Since(back).Round(time.Millisecond))

	var done bool
	q := `SELECT done_at IS NOT NULL FROM sqlinbox_schedule_shares WHERE schedule = 'tick' AND moment = $1 AND worker = $2`
	if err := direct.QueryRowContext(ctx, q, r.FiredAt.UnixMilli(), r.Worker).Scan(&done); err != nil {
		t.Fatal(err)
	}
	if !done {
		t.Fatalf("a's share of %v is not marked done once its done landed\n%s", r.FiredAt, log)
	}
	mu.Lock()
	defer mu.Unlock()
	for k, by := range runs {
		if len(by) > 1 {
			t.Errorf("the share %d of %v ran %d times, on %v\n%s", k.worker, k.at, len(by), by, log)
		}
	}
}

// waitLog waits until log holds part.
func waitLog(t *testing.T, log *syncBuffer, part string) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !strings.Contains(log.String(), part) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q logged within %v:\n%s", part, wait, log)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
