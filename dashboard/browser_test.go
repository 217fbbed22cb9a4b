package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sqlinbox/sqlinbox/dashboard"
	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/migrations"
	"github.com/sqlinbox/sqlinbox/schedule"
)

// browserDBs runs a browser test on SQLite, Postgres and MariaDB.
func browserDBs(t *testing.T, f func(t *testing.T, url string)) {
	eachDB(t, f)
	t.Run("mysql", func(t *testing.T) { t.Parallel(); f(t, inboxtest.MySQL(t)) })
}

// click clicks sel and waits for the page it leads to: the old page's body
// is marked first, so a wait cannot be met by the page the click left.
func click(t *testing.T, ctx context.Context, what, sel string, then ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	steps := append([]chromedp.Action[chromedp.Void]{chromedp.Evaluate[chromedp.Void](`document.body.dataset.left = "1"`),
		chromedp.Click(sel), chromedp.WaitNotPresent(`body[data-left]`), chromedp.WaitReady(`body`)}, then...)
	do(t, ctx, what, steps...)
}

// text reads the text of the first node sel matches, in one script (a live
// refresh may replace nodes between a query and a read); "" when none.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	got, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(function(){ var n = document.querySelector(%q); return n ? n.textContent.trim() : "" })()`, sel)))
	if err != nil {
		t.Fatalf("read %s: %v", sel, err)
	}
	return got
}

// browser starts headless Chromium for the test. Without one it skips,
// except in CI (CI set), where .ci/run installs it and a skip would hide a
// missing step.
func browser(t *testing.T) context.Context {
	t.Helper()
	var path string
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("no Chromium on PATH: .ci/run installs Debian's chromium package")
		}
		t.Skip("no Chromium on PATH: install Debian's chromium package to run the browser tests")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 900))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 5*time.Minute) // two Chromiums at once took over 2 min at load 40
	t.Cleanup(func() { cancelTimeout(); cancel(); cancelAlloc() })
	return ctx
}

func do(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("browser: %s: %v", what, err)
	}
}

// liveRefresh is the browser tests' refresh: long enough that a refresh,
// which replaces the live parts of a page, does not land between finding
// a link there and clicking it ("could not find node"), short enough that
// the test sees one.
const liveRefresh = 5 * time.Second

// pwned is what the hostile payloads would set if any of them ran.
func pwned(t *testing.T, ctx context.Context) {
	t.Helper()
	got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`typeof window.pwned === "undefined" ? "" : String(window.pwned)`))
	if err != nil {
		t.Fatal(err)
	}
	if got != "" {
		t.Fatalf("a hostile payload ran in the page: window.pwned = %q", got)
	}
}

// screenshot saves the page to $SQLINBOX_SCREENSHOTS/name.png when that is
// set (the pictures of docs/operating.md come from here).
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("SQLINBOX_SCREENSHOTS")
	if dir == "" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// In a real browser: the overview and the queue page load, hostile
// payloads stay inert, unpark on a parked row gets it handled by the
// running service, and pause stops the queue until resume.
func TestBrowser(t *testing.T) {
	browserDBs(t, func(t *testing.T, dbURL string) {
		s := newSite(t, dbURL, dashboard.Refresh(liveRefresh))
		ctx := browser(t)
		id := s.publish("bad")
		s.waitParked(1)
		for i, p := range hostile {
			if _, err := s.b.DB().Exec(s.rebind("INSERT INTO jobs (payload, locked_until, last_error) VALUES ($1, $2, $3)"), []byte(p), s.far(), fmt.Sprintf("attempt %d: %s", i, p)); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 12 {
			s.publish(fmt.Sprintf(`{"invoice": %d}`, 1000+i))
		}

		s.seedMinutes()
		do(t, ctx, "overview", chromedp.Navigate(s.url("")), chromedp.WaitVisible(`tr[data-queue="jobs"]`))
		pwned(t, ctx)
		bars, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('tr[data-queue="jobs"] svg.chart rect').length`))
		if err != nil || bars < 50 {
			t.Fatalf("the chart of an hour of handlings drew %d shapes (%v), want a bar a minute", bars, err)
		}
		screenshot(t, ctx, "dashboard-overview")

		do(t, ctx, "queue page", chromedp.Click(`tr[data-queue="jobs"] a`), chromedp.WaitVisible(`#rows`))
		pwned(t, ctx)
		// A live refresh replaces the counts; still nothing runs.
		refreshed, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.body.dataset.refreshed !== undefined`, chromedp.WithPollingTimeout(30*time.Second)))
		if err != nil || !refreshed {
			t.Fatalf("the page's counts were not refreshed within 30s: %v", err)
		}
		pwned(t, ctx)
		screenshot(t, ctx, "dashboard-queue")

		s.fixed.Store(true)
		do(t, ctx, "tick the parked row", chromedp.Click(fmt.Sprintf(`tr[data-id="%d"] input[type=checkbox]`, id)))
		do(t, ctx, "click unpark", chromedp.Click(`#unpark-selected`))
		do(t, ctx, "see the flash", chromedp.WaitVisible(`#flash`))
		s.waitHandled("bad")
		text, err := chromedp.Run(ctx, chromedp.Text(`#flash`))
		if err != nil || text != "unpark: 1 rows changed" {
			t.Fatalf("flash after unpark: %q, %v", text, err)
		}

		do(t, ctx, "pause", chromedp.Click(`#pause`), chromedp.WaitVisible(`#resume`))
		start := time.Now()
		for !s.svc.Paused("jobs", "") {
			if time.Since(start) > inboxtest.Timeout {
				t.Fatal("the service did not see the pause")
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("pause seen by the service %v after the click's page loaded", time.Since(start))
		s.publish("while paused")
		// Ten polls of the subscription: a paused queue claims nothing.
		select {
		case p := <-s.handled:
			t.Fatalf("%q handled while the queue was paused", p)
		case <-time.After(10 * 50 * time.Millisecond):
		}
		do(t, ctx, "resume", chromedp.Click(`#resume`), chromedp.WaitVisible(`#pause`))
		s.waitHandled("while paused")
		pwned(t, ctx)
	})
}

// killed records in the registry what an instance killed an hour ago
// leaves behind: its row and its subscription of table, whose heartbeat
// nobody renews.
func (s *site) killed(table string) {
	s.t.Helper()
	ctx := context.Background()
	if err := migrations.Apply(ctx, s.b.DB(), table); err != nil {
		s.t.Fatal(err)
	}
	roles, _ := json.Marshal(inbox.ReferenceRoles())
	hourAgo := time.Now().Add(-time.Hour).UnixMilli()
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{"INSERT INTO sqlinbox_instances (id, service, version, host, pid, started_at, heartbeat_at, every_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
			[]any{"killed-1", "orders", "2.0.0", "host-b", 4242, hourAgo - 60000, hourAgo, 200}},
		{"INSERT INTO sqlinbox_subscriptions (instance, position, name, table_name, group_name, form, workers, lease_ms, roles) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
			[]any{"killed-1", 0, table, table, "", "lease", 4, 600000, string(roles)}}, // a lease of ten minutes
	} {
		if _, err := s.b.DB().Exec(s.rebind(q.sql), q.args...); err != nil {
			s.t.Fatal(err)
		}
	}
}

// delayed writes a row a day away with payload p and last error e ("" for
// none), which the service leaves alone.
func (s *site) delayed(p, e string) int64 {
	s.t.Helper()
	var lastErr any
	if e != "" {
		lastErr = e
	}
	if _, err := s.b.DB().Exec(s.rebind("INSERT INTO jobs (payload, locked_until, last_error) VALUES ($1, $2, $3)"), []byte(p), s.far(), lastErr); err != nil {
		s.t.Fatal(err)
	}
	var id int64
	if err := s.b.DB().QueryRow(s.rebind("SELECT max(id) FROM jobs WHERE payload = $1"), []byte(p)).Scan(&id); err != nil {
		s.t.Fatal(err)
	}
	return id
}

// payloads are the payloads of the table's rows, in id order.
func (s *site) payloads() []string {
	s.t.Helper()
	rows, err := s.b.DB().Query("SELECT payload FROM jobs ORDER BY id")
	if err != nil {
		s.t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var p []byte
		if err := rows.Scan(&p); err != nil {
			s.t.Fatal(err)
		}
		out = append(out, string(p))
	}
	return out
}

// The dashboard never misleads: a queue nobody consumes says so; a bulk
// action needs a filter and a confirmation of its count; an action keeps
// the state the user chose; a row's id opens the row in full.
func TestBrowserNeverMisleads(t *testing.T) {
	browserDBs(t, func(t *testing.T, dbURL string) {
		s := newSite(t, dbURL, dashboard.Refresh(liveRefresh))
		ctx := browser(t)
		s.killed("orders")
		never := []int64{s.delayed("never failed 1", ""), s.delayed("never failed 2", ""), s.delayed("never failed 3", "")}
		s.delayed("smtp 1", "smtp: timeout after 30s")
		s.delayed("smtp 2", "smtp: timeout after 30s")

		// The killed instance's queue: nothing consumes it, and the page
		// says so; the live one runs.
		do(t, ctx, "overview", chromedp.Navigate(s.url("")), chromedp.WaitVisible(`tr[data-queue="orders"]`))
		if got := text(t, ctx, `tr[data-queue="orders"] td.state`); got != "no consumer" {
			t.Errorf("a queue whose only instance was killed shows %q, want \"no consumer\"", got)
		}
		if got := text(t, ctx, `tr[data-queue="jobs"] td.state`); got != "running" {
			t.Errorf("the consumed queue shows %q, want \"running\"", got)
		}
		// On orders (a lease of ten minutes), a row waiting out a retry of
		// 90 s is delayed, one in work under a fresh lease held: the same
		// rule as a 1 s retry under the default 30 s lease, with room for a
		// slow page.
		for _, in := range []time.Duration{90 * time.Second, 590 * time.Second} {
			lu := any(time.Now().Add(in))
			if s.b.Dialect() == "sqlite" {
				lu = time.Now().Add(in).UTC().Format("2006-01-02 15:04:05.000")
			}
			if _, err := s.b.DB().Exec(s.rebind("INSERT INTO orders (payload, locked_until, attempts) VALUES ($1, $2, 1)"), []byte("due in "+in.String()), lu); err != nil {
				t.Fatal(err)
			}
		}
		click(t, ctx, "orders' page", `tr[data-queue="orders"] a`, chromedp.WaitVisible(`#no-consumer`))
		states, err := chromedp.Run(ctx, chromedp.Evaluate[string](`Array.from(document.querySelectorAll('#rows tr[data-id]')).map(r => r.querySelector('td.payload').textContent + ": " + r.querySelector('.pill').textContent).join(", ")`))
		if err != nil || states != "due in 1m30s: delayed, due in 9m50s: held" {
			t.Errorf("orders' rows show %q (%v), want the retry's delayed and the leased one held", states, err)
		}

		// A bulk delete with the box left empty changes nothing.
		do(t, ctx, "jobs' page", chromedp.Navigate(s.url("queue?table=jobs")), chromedp.WaitVisible(`#rows`))
		click(t, ctx, "bulk delete, no filter", `#delete-matching`, chromedp.WaitVisible(`#flash`))
		if got := s.payloads(); len(got) != 5 {
			t.Fatalf("a bulk delete with an empty filter left %q, want the five rows", got)
		}
		if flash := text(t, ctx, `#flash.bad`); !strings.Contains(flash, "no filter given") {
			t.Errorf("flash after an empty filter: %q, want it to say no filter was given", flash)
		}
		// With a filter, the count is asked for first, then only the
		// matching rows go.
		do(t, ctx, "type the filter", chromedp.SendKeys(`#error-contains`, "timeout"))
		click(t, ctx, "bulk delete, filtered", `#delete-matching`, chromedp.WaitVisible(`#confirm`))
		if got := text(t, ctx, `#confirm-count`); got != "2" {
			t.Errorf("the confirmation states %q rows, want 2", got)
		}
		if got := s.payloads(); len(got) != 5 {
			t.Fatalf("rows deleted before the confirmation: %q left", got)
		}
		screenshot(t, ctx, "dashboard-confirm")
		click(t, ctx, "confirm", `#confirm`, chromedp.WaitVisible(`#flash`))
		if got := text(t, ctx, `#flash`); got != "delete: 2 rows changed" {
			t.Errorf("flash after the confirmed delete: %q", got)
		}
		if got := strings.Join(s.payloads(), ","); got != "never failed 1,never failed 2,never failed 3" {
			t.Fatalf("after the confirmed delete the table holds %q, want the three rows that never failed", got)
		}

		// The state filter survives an action.
		do(t, ctx, "choose delayed", chromedp.SetValue(`select[name=state]`, "delayed"))
		click(t, ctx, "show delayed", `form[action="queue"] button`, chromedp.WaitVisible(`#rows`))
		do(t, ctx, "tick a row", chromedp.Click(fmt.Sprintf(`tr[data-id="%d"] input[type=checkbox]`, never[0])))
		click(t, ctx, "delete the ticked row", `#delete-selected`, chromedp.WaitVisible(`#flash`))
		state, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('select[name=state]').value + " " + location.search`))
		if err != nil || !strings.HasPrefix(state, "delayed ") || !strings.Contains(state, "state=delayed") {
			t.Errorf("after an action the state filter reads %q (%v), want delayed kept", state, err)
		}

		// A row's id opens the row in full.
		long := strings.Repeat("0123456789", 60) + "END"
		id := s.delayed(long, "renderer: template <b>missing</b>\n\tat page 2")
		do(t, ctx, "reload", chromedp.Navigate(s.url("queue?table=jobs")), chromedp.WaitVisible(`#rows`))
		click(t, ctx, "open the row", fmt.Sprintf(`tr[data-id="%d"] a`, id), chromedp.WaitVisible(`#row`))
		for sel, want := range map[string]string{
			"#row-payload":    long,
			"#row-last-error": "renderer: template <b>missing</b>\n\tat page 2",
			"#row-attempts":   "0",
			"#row-state":      "delayed",
		} {
			if got := text(t, ctx, sel); got != strings.TrimSpace(want) {
				t.Errorf("row page %s: %q, want %q", sel, got, want)
			}
		}
		if due := text(t, ctx, "#row-due"); !strings.HasPrefix(due, "in 23h59m") && !strings.HasPrefix(due, "in 24h") {
			t.Errorf("row page due: %q, want in a day", due)
		}
		pwned(t, ctx)
	})
}

// On a database without the registry, the overview says how to create it,
// with no error banner.
func TestBrowserWithoutRegistry(t *testing.T) {
	b, err := inbox.Open(postgresOrSQLite(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	h, err := dashboard.New(b)
	if err != nil {
		t.Fatal(err)
	}
	url := newServer(t, h)
	ctx := browser(t)
	do(t, ctx, "overview", chromedp.Navigate(url), chromedp.WaitVisible(`#no-registry`))
	if got := text(t, ctx, "#no-registry"); !strings.Contains(got, "inbox migrate-registry --db URL") || !strings.Contains(got, "migrations.ApplyRegistry") {
		t.Errorf("the notice says %q, want how to create the registry", got)
	}
	if bad := text(t, ctx, ".flash.bad"); bad != "" {
		t.Errorf("an error banner on a database without the registry: %q", bad)
	}
}

// From the schedules page, an operator runs a schedule its code places on
// one instance on every instance: the next moments run on both; and
// gives it back its code's placement. Read-only shows no such form.
func TestBrowserSchedulePlacement(t *testing.T) {
	eachDB(t, func(t *testing.T, dbURL string) {
		s := newSite(t, dbURL, dashboard.Refresh(liveRefresh))
		ctx := context.Background()
		db := s.b.DB()
		if err := migrations.ApplySchedules(ctx, db); err != nil {
			t.Fatal(err)
		}
		ran := make(chan schedule.Run, 1000)
		for _, name := range []string{"packer-a", "packer-b"} {
			sch, err := schedule.New(db, schedule.Instance(name), schedule.HeartbeatEvery(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if err := sch.Add("report", schedule.Every(time.Second), schedule.One, func(ctx context.Context, r schedule.Run) error {
				select {
				case ran <- r:
				default:
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if err := sch.Start(ctx); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { sch.Stop(context.Background()) })
		}
		// bothRan waits for a moment that fired after since and ran on
		// both instances.
		bothRan := func(since time.Time) {
			t.Helper()
			seen := map[time.Time]map[string]bool{}
			deadline := time.After(inboxtest.Timeout)
			for {
				select {
				case r := <-ran:
					if r.FiredAt.Before(since) {
						continue
					}
					if seen[r.FiredAt] == nil {
						seen[r.FiredAt] = map[string]bool{}
					}
					seen[r.FiredAt][r.InstanceName] = true
					if len(seen[r.FiredAt]) == 2 {
						return
					}
				case <-deadline:
					t.Fatalf("no moment after %v ran on both instances within %v: %v", since, inboxtest.Timeout, seen)
				}
			}
		}
		bctx := browser(t)
		do(t, bctx, "schedules", chromedp.Navigate(s.url("schedules")), chromedp.WaitVisible(`tr[data-placement="report"]`))
		do(t, bctx, "choose every instance", chromedp.SetValue(`tr[data-placement="report"] select`, "every-instance"))
		set := time.Now()
		click(t, bctx, "set", `tr[data-placement="report"] .set-placement`, chromedp.WaitVisible(`#flash`))
		if got := text(t, bctx, "#flash"); got != "report runs every-instance from its next moment on" {
			t.Errorf("flash after set: %q", got)
		}
		bothRan(set.Add(time.Second)) // the moment in progress may have been dealt before
		t.Logf("a moment ran on both instances %v after the click", time.Since(set).Round(time.Millisecond))
		if got := text(t, bctx, `tr[data-schedule="report"] .overridden`); got != "every-instance" {
			t.Errorf("the schedules table shows the override as %q, want every-instance", got)
		}
		screenshot(t, bctx, "dashboard-placement")
		click(t, bctx, "reset", `tr[data-placement="report"] .reset-placement`, chromedp.WaitVisible(`#flash`))
		if got := text(t, bctx, "#flash"); got != "report runs as its code places it from its next moment on" {
			t.Errorf("flash after reset: %q", got)
		}
		if over, err := schedule.Overrides(ctx, db); err != nil || len(over) != 0 {
			t.Errorf("overrides after the reset: %v, %v; want none", over, err)
		}
		if got := text(t, bctx, `tr[data-schedule="report"] .overridden`); got != "" {
			t.Errorf("the schedules table still shows an override after the reset: %q", got)
		}
		pwned(t, bctx)
	})
}

// The walk through a failed job of docs/operating.md, in the browser: the
// overview shows a parked row; the queue's parked rows list it; its page
// shows the error in full; once the handler is fixed, Unpark on that page
// gets it handled, and the queue has no parked row left. The screenshots
// of that section come from here.
// It runs on SQLite alone: TestBrowser unparks on every database, and a
// browser less keeps the package's run short.
func TestBrowserFailedJob(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		dbURL := inboxtest.SQLite(t)
		s := newSite(t, dbURL, dashboard.Refresh(liveRefresh))
		for i := range 6 {
			s.publish(fmt.Sprintf(`{"invoice": %d}`, 1000+i))
		}
		bad := `{"invoice": 1013, "customer": "ACME GmbH", "template": "dunning"}`
		id := s.publish(bad)
		s.waitParked(1)
		s.seedMinutes()
		ctx := browser(t)
		do(t, ctx, "overview", chromedp.Navigate(s.url("")), chromedp.WaitVisible(`tr[data-queue="jobs"]`))
		if got := text(t, ctx, `tr[data-queue="jobs"] td:nth-child(6)`); got != "1" {
			t.Errorf("the overview shows %q parked rows, want 1", got)
		}
		screenshot(t, ctx, "dashboard-failed-overview")
		click(t, ctx, "the queue", `tr[data-queue="jobs"] a`, chromedp.WaitVisible(`#rows`))
		do(t, ctx, "choose parked", chromedp.SetValue(`select[name=state]`, "parked"))
		click(t, ctx, "show parked", `form[action="queue"] button`, chromedp.WaitVisible(fmt.Sprintf(`tr[data-id="%d"]`, id)))
		screenshot(t, ctx, "dashboard-failed-parked")
		click(t, ctx, "open the row", fmt.Sprintf(`tr[data-id="%d"] a`, id), chromedp.WaitVisible(`#row`))
		if got := text(t, ctx, "#row-last-error"); got != `render invoice: template "dunning" not found in templates/invoices (known: "standard", "reminder")` {
			t.Errorf("the row's page shows the error %q", got)
		}
		screenshot(t, ctx, "dashboard-failed-row")
		s.fixed.Store(true) // the fix is deployed
		click(t, ctx, "unpark", `#row-unpark`, chromedp.WaitVisible(`#flash`))
		s.waitHandled(bad)
		if got := text(t, ctx, "#flash"); got != "unpark: 1 rows changed" {
			t.Errorf("flash after unpark: %q", got)
		}
		if got := text(t, ctx, `select[name=state] option[selected]`); got != "parked" {
			t.Errorf("after unpark the page shows the state %q, want parked kept", got)
		}
		do(t, ctx, "reload", chromedp.Navigate(s.url("queue?table=jobs&state=parked")), chromedp.WaitVisible(`#rows`))
		if got := text(t, ctx, "#parked-count"); got != "0" {
			t.Errorf("after the unparked row was handled the queue shows %q parked, want 0", got)
		}
		screenshot(t, ctx, "dashboard-failed-unparked")
		pwned(t, ctx)
	})
}
