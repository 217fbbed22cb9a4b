package inboxotel_test

import (
	"context"
	"testing"

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
			b, err := inbox.Open(url(t))
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if err := migrations.Apply(ctx, b.DB(), "jobs"); err != nil {
				t.Fatal(err)
			}
			// A limited queue: its refusals are counted.
			if err := migrations.ApplyLimits(ctx, b.DB()); err != nil {
				t.Fatal(err)
			}
			if _, err := b.DB().ExecContext(ctx, "ALTER TABLE jobs ADD COLUMN customer TEXT"); err != nil {
				t.Fatal(err)
			}
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
			if running["inbox.rows"] != 4 || running["inbox.workers.total"] != 1 || running["inbox.limit.refused"] != 1 {
				t.Fatalf("while running: gauge points %v, want 4 of inbox.rows, 1 of inbox.workers.total and 1 of inbox.limit.refused", running)
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
