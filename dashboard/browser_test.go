package dashboard_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sqlinbox/sqlinbox/dashboard"
	"github.com/sqlinbox/sqlinbox/inboxtest"
)

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
	eachDB(t, func(t *testing.T, dbURL string) {
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
