package inboxotel_test

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxotel"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// Once the service's Run returns, its gauges are unregistered: a
// collection after the broker is closed reads no table (the row gauge's
// query would fail on the closed pool) and reports no gauge of the service.
func TestGaugesEndWithTheService(t *testing.T) {
	for name, url := range map[string]func(testing.TB) string{"sqlite": inboxtest.SQLite, "postgres": inboxtest.Postgres} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := keyedJobs(t, url(t)) // a limited queue: its refusals are counted
			reader := sdkmetric.NewManualReader()
			svc := inbox.NewService("invoices", "1", b)
			svc.Signals = false
			if _, err := inbox.Handle(svc, inbox.MustQueue[job]("jobs"), func(context.Context, job) error { return nil }, inbox.Limit("customer", 2)); err != nil {
				t.Fatal(err)
			}
			if err := inboxotel.Instrument(svc, inboxotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))); err != nil {
				t.Fatal(err)
			}
			gauges := func() (map[string]int, error) {
				var rm metricdata.ResourceMetrics
				err := reader.Collect(ctx, &rm)
				points := map[string]int{}
				for _, sm := range rm.ScopeMetrics {
					for _, m := range sm.Metrics {
						if g, ok := m.Data.(metricdata.Gauge[int64]); ok {
							points[m.Name] += len(g.DataPoints)
						}
						if c, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "inbox.limit.refused" {
							points[m.Name] += len(c.DataPoints)
						}
					}
				}
				return points, err
			}
			rctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- svc.Run(rctx) }()
			<-svc.Started()
			running, err := gauges()
			if err != nil {
				t.Fatal(err)
			}
			if running["inbox.rows"] != 5 || running["inbox.workers.total"] != 1 || running["inbox.limit.refused"] != 1 || running["inbox.limit.waiting"] != 1 {
				t.Fatalf("while running: gauge points %v, want 5 of inbox.rows, 1 of inbox.workers.total, 1 of inbox.limit.refused and 1 of inbox.limit.waiting", running)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			stopped, err := gauges()
			if err != nil {
				t.Errorf("collection after the service stopped: %v (its gauges still query the tables)", err)
			}
			if len(stopped) != 0 {
				t.Errorf("after the service stopped: gauge points %v, want none", stopped)
			}
		})
	}
}

// keyedJobs opens url with the reference table jobs, a customer column
// added to limit, and the slot table; the broker closes with the test.
func keyedJobs(t *testing.T, url string) *inbox.Broker {
	t.Helper()
	ctx := context.Background()
	b, err := inbox.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if err := migrations.Apply(ctx, b.DB(), "jobs"); err != nil {
		t.Fatal(err)
	}
	if err := migrations.ApplyLimits(ctx, b.DB()); err != nil {
		t.Fatal(err)
	}
	if _, err := b.DB().ExecContext(ctx, "ALTER TABLE jobs ADD COLUMN customer VARCHAR(64)"); err != nil {
		t.Fatal(err)
	}
	return b
}

// keyedJob is job with a customer column to limit.
type keyedJob struct {
	ID          int64      `db:"id" inbox:"id,generated"`
	LockedUntil *time.Time `db:"locked_until" inbox:"locked_until"`
	Payload     []byte     `db:"payload" inbox:"payload"`
	Customer    string     `db:"customer"`
}

// inbox.limit.waiting counts the rows of a full key value that claims pass
// over: customer a's 5 rows behind its 2 in work, b's row in work none.
func TestLimitWaitingGauge(t *testing.T) {
	for name, url := range map[string]func(testing.TB) string{"sqlite": inboxtest.SQLite, "postgres": inboxtest.Postgres, "mysql": inboxtest.MySQL} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := keyedJobs(t, url(t))
			if _, err := b.DB().ExecContext(ctx, "INSERT INTO jobs (payload, customer) VALUES ('p', 'a'), ('p', 'a'), ('p', 'a'), ('p', 'a'), ('p', 'a'), ('p', 'a'), ('p', 'a'), ('p', 'b')"); err != nil {
				t.Fatal(err)
			}
			reader := sdkmetric.NewManualReader()
			svc := inbox.NewService("tenants", "1", b)
			svc.Signals = false
			started, release := make(chan string, 8), make(chan struct{})
			if _, err := inbox.Handle(svc, inbox.MustQueue[keyedJob]("jobs"), func(_ context.Context, j keyedJob) error {
				started <- j.Customer
				<-release
				return nil
			}, inbox.Workers(4), inbox.Limit("customer", 2)); err != nil {
				t.Fatal(err)
			}
			if err := inboxotel.Instrument(svc, inboxotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))); err != nil {
				t.Fatal(err)
			}
			inboxtest.StartLive(t, svc)
			t.Cleanup(func() { close(release) }) // before the service stops
			for range 3 {
				select {
				case <-started:
				case <-time.After(30 * time.Second):
					t.Fatal("waited 30s for 3 rows in work")
				}
			}
			var rm metricdata.ResourceMetrics
			if err := reader.Collect(ctx, &rm); err != nil {
				t.Fatal(err)
			}
			var got []int64
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					if g, ok := m.Data.(metricdata.Gauge[int64]); ok && m.Name == "inbox.limit.waiting" {
						for _, p := range g.DataPoints {
							got = append(got, p.Value)
						}
					}
				}
			}
			if len(got) != 1 || got[0] != 5 {
				t.Fatalf("inbox.limit.waiting = %v, want one point of 5", got)
			}
		})
	}
}
