package dashboard_test

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/dashboard"
	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// Job is the reference table's row.
type Job struct {
	ID          int64          `db:"id" inbox:"id,generated"`
	LockedUntil *time.Time     `db:"locked_until" inbox:"locked_until"`
	Payload     []byte         `db:"payload" inbox:"payload"`
	Attempts    int            `db:"attempts" inbox:"attempts"`
	LastError   sql.NullString `db:"last_error" inbox:"last_error"`
}

var jobs = inbox.MustQueue[Job]("jobs")

// Hostile payloads: rendered, none may run a script.
var hostile = []string{
	`<script>window.pwned = "script"</script>`,
	`"><img src=x onerror="window.pwned = 'img'">`,
	`' onmouseover='window.pwned = 1`,
	`javascript:window.pwned = 'href'`,
}

// site is a registered service with one subscription of jobs, and a
// dashboard on the same database.
type site struct {
	t       testing.TB
	b       *inbox.Broker
	svc     *inbox.Service
	handled chan string // payloads handled successfully
	fixed   atomic.Bool // rows whose payload is "bad" fail until set
	srv     *httptest.Server
	// A row whose payload is "slow" runs until its context ends: started
	// gets its id, then ended its context's cause.
	started chan int64
	ended   chan error
}

// newSite runs a service that parks a row whose payload is "bad" at its
// first failure, and serves the dashboard with cfg.
func newSite(t testing.TB, url string, opts ...dashboard.Option) *site {
	t.Helper()
	ctx := context.Background()
	b, err := inbox.Open(url, inbox.PollInterval(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	for _, m := range []func() error{
		func() error { return migrations.Apply(ctx, b.DB(), "jobs") },
		func() error { return migrations.ApplyRegistry(ctx, b.DB()) },
	} {
		if err := m(); err != nil {
			t.Fatal(err)
		}
	}
	s := &site{t: t, b: b, handled: make(chan string, 100), started: make(chan int64, 1), ended: make(chan error, 1)}
	s.svc = inbox.NewService("invoices", "1.4.2", b)
	s.svc.Signals = false
	if err := s.svc.Register(inbox.RegistryHeartbeat(200 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := inbox.Handle(s.svc, jobs, s.handle, inbox.MaxAttempts(1), inbox.Workers(2)); err != nil {
		t.Fatal(err)
	}
	inboxtest.StartLive(t, s.svc)
	h, err := dashboard.New(b, opts...)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/admin/inbox/", http.StripPrefix("/admin/inbox", h))
	s.srv = httptest.NewServer(mux)
	t.Cleanup(s.srv.Close)
	return s
}

func (s *site) handle(ctx context.Context, j Job) error {
	if string(j.Payload) == "slow" {
		s.started <- j.ID
		<-ctx.Done()
		s.ended <- context.Cause(ctx)
		return nil
	}
	if string(j.Payload) == "bad" && !s.fixed.Load() {
		return errors.New("renderer: template <b>missing</b>")
	}
	if strings.Contains(string(j.Payload), `"template": "dunning"`) && !s.fixed.Load() {
		return errors.New(`render invoice: template "dunning" not found in templates/invoices (known: "standard", "reminder")`)
	}
	s.handled <- string(j.Payload)
	return nil
}

// publish writes a row with payload p.
func (s *site) publish(p string) int64 {
	s.t.Helper()
	id, err := inbox.Publish(context.Background(), s.b, jobs, Job{Payload: []byte(p)})
	if err != nil {
		s.t.Fatal(err)
	}
	return id
}

// waitHandled waits until the payload p was handled successfully.
func (s *site) waitHandled(p string) {
	s.t.Helper()
	deadline := time.After(inboxtest.Timeout)
	for {
		select {
		case got := <-s.handled:
			if got == p {
				return
			}
		case <-deadline:
			s.t.Fatalf("payload %q not handled within %v", p, inboxtest.Timeout)
		}
	}
}

// waitParked waits until the table holds n parked rows.
func (s *site) waitParked(n int) {
	s.t.Helper()
	inboxtest.WaitRows(s.t, s.b, jobs, "parked rows", func(rows []inboxtest.Row) bool {
		parked := 0
		for _, r := range rows {
			if r.State == inboxtest.Parked {
				parked++
			}
		}
		return parked == n
	})
}

// url is the dashboard's address for path (relative to its prefix).
func (s *site) url(path string) string { return s.srv.URL + "/admin/inbox/" + path }

// client keeps cookies, like a browser, and does not follow redirects.
func client(t testing.TB) *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func contains(t testing.TB, body, want string) {
	t.Helper()
	if !strings.Contains(body, want) {
		t.Fatalf("page lacks %q:\n%s", want, body)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// rebind turns $n placeholders into SQLite's ?n, or MariaDB's ? (the
// statements here name each parameter once, in order).
func (s *site) rebind(q string) string {
	switch s.b.Dialect() {
	case "sqlite":
		return regexp.MustCompile(`\$(\d+)`).ReplaceAllString(q, "?$1")
	case "mysql":
		return regexp.MustCompile(`\$(\d+)`).ReplaceAllString(q, "?")
	}
	return q
}

// far is a locked_until a day from now, as the table stores it.
func (s *site) far() any {
	t := time.Now().Add(24 * time.Hour)
	if s.b.Dialect() == "sqlite" {
		return t.UTC().Format("2006-01-02 15:04:05.000")
	}
	return t
}

// newServer serves h at the root and returns its address with a slash.
func newServer(t testing.TB, h http.Handler) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL + "/"
}

// seedMinutes writes an hour of per-minute counts for jobs into the
// registry, as registered instances would have, so the chart has bars.
func (s *site) seedMinutes() {
	s.t.Helper()
	now := time.Now().Truncate(time.Minute)
	for i := range 60 {
		at := now.Add(-time.Duration(i) * time.Minute).UnixMilli()
		for outcome, n := range map[string]int{"acked": 400 + 30*(i%7) + 5*i, "retried": (i * 13) % 40} {
			if _, err := s.b.DB().Exec(s.rebind(`INSERT INTO sqlinbox_queue_minutes (table_name, group_name, minute, outcome, handled, total_us, max_us)
				VALUES ('jobs', '', $1, $2, $3, $4, $5)`), at, outcome, n, n*2500, 9000); err != nil {
				s.t.Fatal(err)
			}
		}
	}
}

// postgresOrSQLite is Postgres where POSTGRES_TEST_URL is set, else SQLite.
func postgresOrSQLite(t testing.TB) string {
	if os.Getenv("POSTGRES_TEST_URL") != "" {
		return inboxtest.Postgres(t)
	}
	return inboxtest.SQLite(t)
}
