package inboxotel_test

import (
	"context"
	"fmt"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxotel"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// docs/operating.md's "Metrics and traces" in code, with a ManualReader in place
// of an exporter.
func ExampleInstrument() {
	ctx := context.Background()
	b, err := inbox.Open("sqlite://:memory:example_instrument")
	if err != nil {
		panic(err)
	}
	defer b.Close()
	if err := migrations.Apply(ctx, b.DB(), "invoice_jobs"); err != nil {
		panic(err)
	}
	reader := sdkmetric.NewManualReader()
	svc := inbox.NewService("invoices", "1.4.0", b)
	svc.Signals = false
	queue := inbox.MustQueue[job]("invoice_jobs")
	done := make(chan struct{}, 3)
	render := func(ctx context.Context, j job) error { done <- struct{}{}; return nil }
	_, _ = inbox.Handle(svc, queue, render, inbox.Workers(8))
	if err := inboxotel.Instrument(svc, inboxotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))); err != nil {
		panic(err)
	}
	for range 3 {
		if _, err := inbox.Publish(ctx, b, queue, job{Payload: []byte("{}")}); err != nil {
			panic(err)
		}
	}
	rctx, cancel := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- svc.Run(rctx) }()
	for range 3 {
		<-done
	}
	cancel()
	<-stopped
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if s, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "inbox.handlings" {
			v, _ := s.DataPoints[0].Attributes.Value("outcome")
			fmt.Println(m.Name, v.AsString(), s.DataPoints[0].Value)
		}
	}
	// Output:
	// inbox.handlings acked 3
}
