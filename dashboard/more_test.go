package dashboard_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sqlinbox/sqlinbox/dashboard"
	"github.com/sqlinbox/sqlinbox/lock"
	"github.com/sqlinbox/sqlinbox/migrations"
	"github.com/sqlinbox/sqlinbox/schedule"
)

// hostileLock is a lock name a page must show as text.
const hostileLock = `order-7"><img src=x onerror="window.pwned = 'lock'">`

// withLocksAndSchedules holds two places of a lock and one of a hostile
// name on the site's database, and runs a schedule on every worker of two
// instances until one moment was shared among them.
func (s *site) withLocksAndSchedules() {
	s.t.Helper()
	ctx := context.Background()
	db := s.b.DB()
	if err := migrations.ApplyLocks(ctx, db); err != nil {
		s.t.Fatal(err)
	}
	store, err := lock.NewSQL(ctx, db)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { store.Close() })
	locker, err := lock.New(store, lock.Namespace("shop"))
	if err != nil {
		s.t.Fatal(err)
	}
	for _, name := range []string{"payment-service", "payment-service", hostileLock} {
		if _, ok, err := locker.Take(ctx, name, lock.MaxHolders(3), lock.TTL(time.Hour)); err != nil || !ok {
			s.t.Fatalf("take %q: %v %v", name, ok, err)
		}
	}
	if err := migrations.ApplySchedules(ctx, db); err != nil {
		s.t.Fatal(err)
	}
	ran := make(chan schedule.Run, 100)
	for _, name := range []string{"packer-a", "packer-b"} {
		sch, err := schedule.New(db, schedule.Instance(name), schedule.DefaultWorkers(2), schedule.HeartbeatEvery(200*time.Millisecond))
		if err != nil {
			s.t.Fatal(err)
		}
		if err := sch.Add("pack_orders", schedule.Every(time.Second), schedule.EveryWorker, func(ctx context.Context, r schedule.Run) error {
			ran <- r
			return nil
		}); err != nil {
			s.t.Fatal(err)
		}
		if err := sch.Start(ctx); err != nil {
			s.t.Fatal(err)
		}
		s.t.Cleanup(func() { sch.Stop(context.Background()) })
	}
	// A moment shared by both instances: four runs of one FiredAt.
	runs := map[time.Time]int{}
	deadline := time.After(30 * time.Second)
	for {
		select {
		case r := <-ran:
			runs[r.FiredAt]++
			if runs[r.FiredAt] == 4 {
				return
			}
		case <-deadline:
			s.t.Fatalf("no moment ran on both instances within 30s: %v", runs)
		}
	}
}

// The locks page lists held places with their fencing numbers, the lock
// names escaped; the schedules page lists the members, the moments and
// what they were shared among.
func TestLocksAndSchedulesPages(t *testing.T) {
	eachDB(t, func(t *testing.T, dbURL string) {
		s := newSite(t, dbURL, dashboard.Config{})
		s.withLocksAndSchedules()
		c := client(t)
		code, body := get(t, c, s.url("locks"))
		if code != http.StatusOK {
			t.Fatalf("locks: %d\n%s", code, body)
		}
		if strings.Count(body, "<td>payment-service</td>") != 2 || strings.Contains(body, hostileLock) {
			t.Fatalf("locks page: want two places of payment-service and the hostile name escaped:\n%s", body)
		}
		contains(t, body, "order-7&#34;&gt;&lt;img")
		code, body = get(t, c, s.url("schedules"))
		if code != http.StatusOK {
			t.Fatalf("schedules: %d\n%s", code, body)
		}
		contains(t, body, "<td>packer-a</td>")
		contains(t, body, "<td>packer-b</td>")
		contains(t, body, "packer-a, packer-b")
	})
}

// The same pages in the browser, for the README's pictures.
func TestBrowserLocksAndSchedules(t *testing.T) {
	s := newSite(t, postgresOrSQLite(t), dashboard.Config{Refresh: liveRefresh})
	ctx := browser(t)
	s.withLocksAndSchedules()
	do(t, ctx, "locks", chromedp.Navigate(s.url("")), chromedp.Click(`a[href="locks"]`), chromedp.WaitVisible(`tr[data-lock]`))
	pwned(t, ctx)
	screenshot(t, ctx, "dashboard-locks")
	do(t, ctx, "schedules", chromedp.Click(`a[href="schedules"]`), chromedp.WaitVisible(`tr[data-moment]`))
	pwned(t, ctx)
	screenshot(t, ctx, "dashboard-schedules")
}
