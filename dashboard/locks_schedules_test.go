package dashboard_test

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"regexp"
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

// hostileFailure is a schedule handler's error a page must show as text.
const hostileFailure = `<script>window.pwned = 'schedule'</script>"><img src=x onerror="window.pwned = 'failure'">`

// withLocksAndSchedules holds two places of a lock and one of a hostile
// name on the site's database, and runs a schedule on every worker of two
// instances until one moment was shared among them, and one on every
// instance whose runs fail with a hostile error until the failures are
// told in the instances' heartbeats.
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
			select {
			case ran <- r:
			default: // nobody counts runs after the setup: a full channel must not block Stop
			}
			return nil
		}); err != nil {
			s.t.Fatal(err)
		}
		if err := sch.Add("send_reports", schedule.Every(time.Second), schedule.EveryInstance, func(ctx context.Context, r schedule.Run) error {
			return errors.New(hostileFailure)
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
				s.waitFailuresTold(db)
				return
			}
		case <-deadline:
			s.t.Fatalf("no moment ran on both instances within 30s: %v", runs)
		}
	}
}

// waitFailuresTold waits until both instances' heartbeats tell a failure
// of send_reports, and a moment of it has a failed share.
func (s *site) waitFailuresTold(db *sql.DB) {
	s.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := schedule.Inspect(context.Background(), db, 50)
		if err != nil {
			s.t.Fatal(err)
		}
		told, failed := 0, false
		for _, h := range st.Heartbeats {
			if h.Schedule == "send_reports" && h.Failures > 0 {
				told++
			}
		}
		for _, m := range st.Moments {
			failed = failed || m.Schedule == "send_reports" && m.Failed > 0
		}
		if told == 2 && failed {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("send_reports' failures not told within 30s: %+v", st)
		}
		time.Sleep(20 * time.Millisecond) // polls the tables, which send no signal
	}
}

// The locks page lists held places with their fencing numbers, the lock
// names escaped; the schedules page lists the members, the moments and
// what they were shared among.
func TestLocksAndSchedulesPages(t *testing.T) {
	eachDB(t, func(t *testing.T, dbURL string) {
		s := newSite(t, dbURL)
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
		// The schedules, their next moments and the failures, escaped.
		contains(t, body, `<tr data-schedule="send_reports">`)
		contains(t, body, "every 1s")
		contains(t, body, "every-instance")
		if strings.Contains(body, hostileFailure) || !strings.Contains(body, "&lt;script&gt;window.pwned = &#39;schedule&#39;&lt;/script&gt;") {
			t.Fatalf("schedules page: want the handler's error shown escaped:\n%s", body)
		}
		if !regexp.MustCompile(`class="next">\d\d:\d\d:\d\d UTC <span class="muted">\((in \d+s|now)\)`).MatchString(body) {
			t.Fatalf("schedules page: want the next moment as a time and \"in 1s\":\n%s", body)
		}
	})
}

// The same pages in the browser, for the pictures of docs/operating.md: the schedules
// page shows the next moment and the failures, whose hostile error stays
// text, also after a live refresh.
func TestBrowserLocksAndSchedules(t *testing.T) {
	eachDB(t, func(t *testing.T, dbURL string) {
		s := newSite(t, dbURL, dashboard.Refresh(liveRefresh))
		s.withLocksAndSchedules()
		ctx := browser(t) // after the setup: the browser's time runs from here
		do(t, ctx, "locks", chromedp.Navigate(s.url("")), chromedp.Click(`a[href="locks"]`), chromedp.WaitVisible(`tr[data-lock]`))
		pwned(t, ctx)
		screenshot(t, ctx, "dashboard-locks")
		do(t, ctx, "schedules", chromedp.Click(`a[href="schedules"]`), chromedp.WaitVisible(`tr[data-moment]`),
			chromedp.WaitVisible(`tr[data-schedule="send_reports"] .last-error`))
		// Read in one script: a live refresh may replace the nodes between
		// a query and a read.
		text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('tr[data-schedule="send_reports"] .last-error').textContent`))
		if err != nil || text != hostileFailure {
			t.Fatalf("last error shown as %q (%v), want the text %q", text, err, hostileFailure)
		}
		next, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('tr[data-schedule="send_reports"] td.next').textContent`))
		if err != nil || !regexp.MustCompile(`^\d\d:\d\d:\d\d UTC \((in \d+s|now)\)`).MatchString(next) {
			t.Fatalf("next moments shown as %q (%v), want a time and \"in 1s\"", next, err)
		}
		failed, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('tr[data-moment="send_reports"] .share-error').length`))
		if err != nil || failed == 0 {
			t.Fatalf("%d failed shares shown (%v), want some", failed, err)
		}
		// A live refresh puts the failures back, as text again.
		do(t, ctx, "live refresh", chromedp.Evaluate[chromedp.Void](`document.body.dataset.refreshed = "before"`),
			chromedp.WaitNotPresent(`body[data-refreshed="before"]`))
		pwned(t, ctx)
		t.Logf("next moments: %s", next)
		screenshot(t, ctx, "dashboard-schedules")
	})
}
