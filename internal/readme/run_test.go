package readme_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// within receives from ch, failing the test after inboxtest.Timeout.
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(inboxtest.Timeout):
		t.Fatalf("waited %v for %s", inboxtest.Timeout, what)
		var zero T
		return zero
	}
}

func TestServiceSample(t *testing.T) {
	url := "sqlite://" + filepath.Join(t.TempDir(), "jobs.db")
	db, err := inbox.OpenDB(url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := migrations.Apply(ctx, db, "invoice_jobs"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO invoice_jobs (payload) VALUES ('{"invoice": 1}')`); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- runService(ctx, url) }()
	if got := within(t, rendered, "the row rendered"); string(got) != `{"invoice": 1}` {
		t.Fatalf("rendered %q", got)
	}
	cancel()
	if err := within(t, done, "the service to stop"); err != nil {
		t.Fatalf("the service sample: %v", err)
	}
}

func TestRowLockAndTriggerSamples(t *testing.T) {
	ctx := context.Background()
	b := inboxtest.NewBroker(t, inboxtest.Postgres(t))
	if err := migrations.Apply(ctx, b.DB(), "invoice_jobs"); err != nil {
		t.Fatal(err)
	}
	if err := installTrigger(ctx, b.DB()); err != nil {
		t.Fatalf("the trigger sample: %v", err)
	}
	q := inbox.MustQueue[RenderInvoice]("invoice_jobs")
	got := make(chan int64, 1)
	sub, err := subscribeRowLock(b, q, func(ctx context.Context, job RenderInvoice) error { got <- job.ID; return nil })
	if err != nil {
		t.Fatalf("the row-lock sample: %v", err)
	}
	inboxtest.RunSubscription(t, sub)
	id, err := inbox.Publish(ctx, b, q, RenderInvoice{Payload: []byte("{}")})
	if err != nil {
		t.Fatal(err)
	}
	if h := within(t, got, "the row handled in the row-lock form"); h != id {
		t.Fatalf("handled %d, published %d", h, id)
	}
}

func TestLockSample(t *testing.T) {
	ctx := context.Background()
	db, err := inbox.OpenDB("sqlite://" + filepath.Join(t.TempDir(), "locks.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := migrations.ApplyLocks(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := takeLock(ctx, db); err != nil {
		t.Fatalf("the lock sample: %v", err)
	}
}

func TestSchedulesSample(t *testing.T) {
	db, err := inbox.OpenDB("sqlite://" + filepath.Join(t.TempDir(), "schedules.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := migrations.ApplySchedules(ctx, db); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- runSchedules(ctx, db, started) }()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("the schedules sample: %v", err)
	case <-time.After(inboxtest.Timeout):
		t.Fatal("the schedules sample did not start")
	}
	cancel()
	if err := within(t, done, "the schedules to stop"); err != nil {
		t.Fatal(err)
	}
}

func TestRegistryAndDashboardSamples(t *testing.T) {
	b := inboxtest.NewBroker(t, inboxtest.SQLite(t))
	svc, err := registered(b)
	if err != nil {
		t.Fatalf("the registry sample: %v", err)
	}
	if _, err := inbox.Handle(svc, inbox.MustQueue[RenderInvoice]("invoice_jobs"), func(context.Context, RenderInvoice) error { return nil }); err != nil {
		t.Fatal(err)
	}
	svc.OnStart(func(ctx context.Context) error { return migrations.Apply(ctx, b.DB(), "invoice_jobs") })
	inboxtest.Start(t, svc)
	srv := httptest.NewServer(dashboardMux(b))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/admin/inbox/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the dashboard sample answered %s", resp.Status)
	}
}
