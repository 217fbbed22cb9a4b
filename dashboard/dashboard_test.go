package dashboard_test

import (
	"errors"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/dashboard"
	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
)

func eachDB(t *testing.T, f func(t *testing.T, url string)) {
	t.Run("sqlite", func(t *testing.T) { t.Parallel(); f(t, inboxtest.SQLite(t)) })
	t.Run("postgres", func(t *testing.T) { t.Parallel(); f(t, inboxtest.Postgres(t)) })
}

func get(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]{64})"`)

// The overview lists the registered queue and its instance; the queue page
// lists its rows with every payload escaped, binary ones as hex, and the
// parked row's error.
func TestPagesShowQueuesAndEscapeRows(t *testing.T) {
	eachDB(t, func(t *testing.T, dbURL string) {
		s := newSite(t, dbURL)
		s.publish("bad")
		s.waitParked(1)
		// Rows a day away, so the service leaves them for the page.
		for _, p := range hostile {
			if _, err := s.b.DB().Exec(s.rebind("INSERT INTO jobs (payload, locked_until, last_error) VALUES ($1, $2, $3)"), []byte(p), s.far(), p); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.b.DB().Exec(s.rebind("INSERT INTO jobs (payload, locked_until) VALUES ($1, $2)"), []byte{0, 0xff, 0x10, 'a'}, s.far()); err != nil {
			t.Fatal(err)
		}
		c := client(t)
		code, body := get(t, c, s.url(""))
		if code != http.StatusOK {
			t.Fatalf("overview: %d\n%s", code, body)
		}
		contains(t, body, `href="queue?table=jobs"`)
		contains(t, body, "invoices")
		contains(t, body, `<span class="pill alive">alive</span>`)
		contains(t, body, `<svg class="chart"`)
		if strings.Contains(body, "pickups at the poll") {
			t.Error("an instance whose pickups do not fall back is marked as polling")
		}
		// An instance whose pickups fall back to the poll (as the registry
		// of one behind transaction pooling without ListenURL holds it).
		now := time.Now().UnixMilli()
		if _, err := s.b.DB().Exec(s.rebind("INSERT INTO sqlinbox_instances (id, service, version, host, pid, started_at, heartbeat_at, every_ms, pickup_fallback) VALUES ('polled', 'reports', '1', 'h', 1, $1, $1, 60000, 'no ListenURL <behind> the pooler')"), now); err != nil {
			t.Fatal(err)
		}
		_, body = get(t, c, s.url(""))
		contains(t, body, `<span class="pill" title="no ListenURL &lt;behind&gt; the pooler">pickups at the poll</span>`)

		code, body = get(t, c, s.url("queue?table=jobs"))
		if code != http.StatusOK {
			t.Fatalf("queue page: %d\n%s", code, body)
		}
		for _, p := range hostile {
			if strings.Contains(body, p) {
				t.Errorf("payload %q reached the page unescaped", p)
			}
		}
		contains(t, body, "&lt;script&gt;")
		contains(t, body, "hex 00ff1061")
		contains(t, body, "renderer: template &lt;b&gt;missing&lt;/b&gt;")
		contains(t, body, `<span class="pill parked">parked</span>`)
	})
}

// A POST without the page's token, with another token, or from another
// origin changes nothing; with it, the parked row is unparked and the
// running service handles it.
func TestActionsNeedTheToken(t *testing.T) {
	eachDB(t, func(t *testing.T, dbURL string) {
		s := newSite(t, dbURL)
		id := s.publish("bad")
		s.waitParked(1)
		s.fixed.Store(true)
		c := client(t)
		_, body := get(t, c, s.url("queue?table=jobs"))
		m := csrfField.FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("no CSRF field on the queue page:\n%s", body)
		}
		form := func(tok string) url.Values {
			return url.Values{"csrf": {tok}, "table": {"jobs"}, "op": {"unpark"}, "id": {itoa(id)}}
		}
		post := func(c *http.Client, v url.Values, origin string) int {
			t.Helper()
			req, _ := http.NewRequest("POST", s.url("action"), strings.NewReader(v.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			if origin != "" {
				req.Header.Set("Origin", origin)
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if loc := resp.Header.Get("Location"); resp.StatusCode == http.StatusSeeOther && loc != "queue?table=jobs" {
				t.Errorf("redirect to %q, want the relative queue?table=jobs (the mount's prefix kept)", loc)
			}
			return resp.StatusCode
		}
		for what, code := range map[string]int{
			"no cookie":    post(client(t), form(m[1]), ""),
			"other token":  post(c, form(strings.Repeat("ab", 32)), ""),
			"other origin": post(c, form(m[1]), "http://evil.example"),
		} {
			if code != http.StatusForbidden {
				t.Errorf("%s: status %d, want 403", what, code)
			}
		}
		if n := len(inboxtest.ParkedRows(t, s.b, jobs)); n != 1 {
			t.Fatalf("%d parked rows after refused posts, want 1", n)
		}
		if code := post(c, form(m[1]), s.srv.URL); code != http.StatusSeeOther {
			t.Fatalf("post with the token: status %d, want 303", code)
		}
		s.waitHandled("bad")
		_, body = get(t, c, s.url("queue?table=jobs"))
		contains(t, body, "unpark: 1 rows changed")
	})
}

// Read-only shows no action and refuses every POST.
func TestReadOnly(t *testing.T) {
	s := newSite(t, inboxtest.SQLite(t), dashboard.ReadOnly())
	c := client(t)
	_, body := get(t, c, s.url("queue?table=jobs"))
	if strings.Contains(body, `name="op"`) {
		t.Fatalf("read-only page shows actions:\n%s", body)
	}
	tok := csrfField.FindStringSubmatch(body)
	v := url.Values{"table": {"jobs"}, "op": {"pause"}}
	if tok != nil {
		v.Set("csrf", tok[1])
	}
	resp, err := c.PostForm(s.url("action"), v)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("read-only POST: %d, want 403", resp.StatusCode)
	}
	_, body = get(t, c, s.url("schedules"))
	if strings.Contains(body, "schedule-placement") {
		t.Fatalf("read-only schedules page shows the placement form:\n%s", body)
	}
	v = url.Values{"schedule": {"report"}, "op": {"set"}, "placement": {"every-instance"}}
	if tok != nil {
		v.Set("csrf", tok[1])
	}
	if resp, err = c.PostForm(s.url("schedule-placement"), v); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("read-only placement POST: %d, want 403", resp.StatusCode)
	}
}

// Only registered queues are shown or changed; the bare prefix redirects to
// the prefix with a slash; a bad config is refused.
func TestUnknownQueuesAndPrefix(t *testing.T) {
	s := newSite(t, inboxtest.SQLite(t))
	c := client(t)
	if code, _ := get(t, c, s.url("queue?table=users")); code != http.StatusNotFound {
		t.Errorf("unregistered table: %d, want 404", code)
	}
	if code, _ := get(t, c, s.url("queue?table="+url.QueryEscape(`jobs";DROP TABLE jobs;--`))); code != http.StatusNotFound {
		t.Errorf("a table name with SQL: %d, want 404", code)
	}
	resp, err := c.Get(s.srv.URL + "/admin/inbox")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); resp.StatusCode/100 != 3 || !strings.HasSuffix(loc, "inbox/") {
		t.Errorf("bare prefix: %d to %q, want a redirect to the prefix with a slash", resp.StatusCode, loc)
	}
}

// Every option refuses a value out of its bound, naming the option, the
// value and the bound, with an error wrapping the module's ErrInvalid; no
// handler is made.
func TestOptionsRefused(t *testing.T) {
	b, err := inbox.Open(inboxtest.SQLite(t))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, tc := range []struct {
		opt  dashboard.Option
		want []string
	}{
		{dashboard.Refresh(time.Millisecond), []string{"Refresh(1ms)", "at least 1s"}},
		{dashboard.Refresh(0), []string{"Refresh(0s)", "at least 1s"}},
		{dashboard.PageSize(0), []string{"PageSize(0)", "1 to 1000"}},
		{dashboard.PageSize(1001), []string{"PageSize(1001)", "1 to 1000"}},
		{dashboard.WithLogger(nil), []string{"WithLogger(nil)"}},
	} {
		h, err := dashboard.New(b, tc.opt)
		if h != nil || !errors.Is(err, dashboard.ErrInvalid) || !errors.Is(err, inbox.ErrInvalid) {
			t.Errorf("%s: %v, %v; want no handler and an error wrapping ErrInvalid", tc.want[0], h, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", tc.want[0], err, w)
			}
		}
	}
	if h, err := dashboard.New(nil); h != nil || !errors.Is(err, dashboard.ErrInvalid) {
		t.Errorf("New(nil): %v, %v; want ErrInvalid", h, err)
	}
}

// The row page of a row in work shows Cancel; posted with the page's
// token, it ends the handler's context with inbox.ErrCanceled and the row
// is parked with the cancel as its last error.
func TestCancelButton(t *testing.T) {
	eachDB(t, func(t *testing.T, dbURL string) {
		s := newSite(t, dbURL)
		id := s.publish("slow")
		select {
		case <-s.started:
		case <-time.After(inboxtest.Timeout):
			t.Fatal("the slow row's handler never started")
		}
		c := client(t)
		_, body := get(t, c, s.url("row?table=jobs&id="+itoa(id)))
		contains(t, body, `id="row-cancel"`)
		m := csrfField.FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("no CSRF field on the row page:\n%s", body)
		}
		req, _ := http.NewRequest("POST", s.url("action"), strings.NewReader(url.Values{"csrf": {m[1]}, "table": {"jobs"}, "op": {"cancel"}, "id": {itoa(id)}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", s.srv.URL)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("cancel post: status %d, want 303", resp.StatusCode)
		}
		select {
		case cause := <-s.ended:
			if !errors.Is(cause, inbox.ErrCanceled) {
				t.Fatalf("handler's context ended with %v, want inbox.ErrCanceled", cause)
			}
		case <-time.After(inboxtest.Timeout):
			t.Fatal("the canceled handler's context never ended")
		}
		s.waitParked(1)
		_, body = get(t, c, s.url("queue?table=jobs"))
		contains(t, body, "cancel: 0 rows parked now, 1 in work")
		_, body = get(t, c, s.url("row?table=jobs&id="+itoa(id)))
		contains(t, body, "inbox: canceled by an operator: from the dashboard")
		if strings.Contains(body, `id="row-cancel"`) {
			t.Fatal("a parked row's page offers Cancel")
		}
	})
}
