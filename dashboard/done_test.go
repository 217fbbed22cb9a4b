package dashboard_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/dashboard"
	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// A queue's done rows (acked, kept in the history) are listed on its page
// with when, by whom and how long, and searched by id, error text and
// time.
func TestDoneRows(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		ctx := context.Background()
		b, err := inbox.Open(url, inbox.PollInterval(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		for _, m := range []func() error{
			func() error { return migrations.Apply(ctx, b.DB(), "jobs") },
			func() error { return migrations.ApplyRegistry(ctx, b.DB()) },
			func() error { return migrations.ApplyHistory(ctx, b.DB(), "jobs", "id", "") },
		} {
			if err := m(); err != nil {
				t.Fatal(err)
			}
		}
		svc := inbox.NewService("invoices", "1.4.2", b)
		svc.Signals = false
		if err := svc.Register(inbox.RegistryHeartbeat(200 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		ev := inboxtest.NewEvents(t)
		if _, err := inbox.Handle(svc, jobs, func(context.Context, Job) error { return nil }, inbox.History(time.Hour), ev.Observe()); err != nil {
			t.Fatal(err)
		}
		if _, err := inbox.PublishMany(ctx, b, jobs, []Job{{Payload: []byte("invoice 1")}, {Payload: []byte("invoice 2")}}); err != nil {
			t.Fatal(err)
		}
		inboxtest.StartLive(t, svc) // stopped at the test's end
		ev.Wait("two acks", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Acked) == 2 })
		h, err := dashboard.New(b)
		if err != nil {
			t.Fatal(err)
		}
		mux := http.NewServeMux()
		mux.Handle("/admin/inbox/", http.StripPrefix("/admin/inbox", h))
		srv := httptest.NewServer(mux)
		defer srv.Close()
		page := func(query string) string {
			code, body := get(t, client(t), srv.URL+"/admin/inbox/queue?table=jobs&state=done"+query)
			if code != http.StatusOK {
				t.Fatalf("queue page of done rows%s: %d\n%s", query, code, body)
			}
			return body
		}
		body := page("")
		for _, want := range []string{"invoice 1", "invoice 2", "handled ", " in ", `<span class="pill done">done</span>`} {
			contains(t, body, want)
		}
		if body := page("&id=2"); !strings.Contains(body, "invoice 2") || strings.Contains(body, "invoice 1") {
			t.Fatalf("done row 2 searched by id: the page shows another row, or not it:\n%s", body)
		}
		later := time.Now().Add(time.Hour).UTC().Format("2006-01-02T15:04")
		if body := page("&from=" + later); strings.Contains(body, "invoice") {
			t.Fatalf("done rows handled from an hour on: the page shows some:\n%s", body)
		}
	})
}
