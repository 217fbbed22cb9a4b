package inboxotel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/inboxotel"
	"github.com/sqlinbox/sqlinbox/lock"
	"github.com/sqlinbox/sqlinbox/schedule"
)

// collect reads reader into metric -> attributes -> value (sums and gauges
// their value, histograms their count; "<name>.sum" their sum).
func collect(t *testing.T, reader *sdkmetric.ManualReader) map[string]map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			got[m.Name] = map[string]float64{}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					got[m.Name][attrs(p.Attributes)] = float64(p.Value)
				}
			case metricdata.Histogram[float64]:
				got[m.Name+".sum"] = map[string]float64{}
				for _, p := range d.DataPoints {
					got[m.Name][attrs(p.Attributes)] = float64(p.Count)
					got[m.Name+".sum"][attrs(p.Attributes)] = p.Sum
				}
			}
		}
	}
	return got
}

// Three takes of one lock: acquired, not acquired after a wait, acquired
// after a wait; the counters and the wait histogram say so.
func TestLockerMetrics(t *testing.T) {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	l, err := lock.New(lock.NewMemory(clock.Host{}))
	if err != nil {
		t.Fatal(err)
	}
	ml, err := inboxotel.NewLocker(l, inboxotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	if err != nil {
		t.Fatal(err)
	}
	h, ok, err := ml.Take(ctx, "nightly", lock.TTL(time.Minute))
	if err != nil || !ok {
		t.Fatalf("first take: %v %v", ok, err)
	}
	if _, ok, err := ml.Take(ctx, "nightly", lock.Wait(50*time.Millisecond)); err != nil || ok {
		t.Fatalf("second take: %v %v, want not acquired", ok, err)
	}
	if err := ml.Release(ctx, h.Token); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := ml.Take(ctx, "nightly", lock.Wait(time.Second)); err != nil || !ok {
		t.Fatalf("third take: %v %v", ok, err)
	}
	got := collect(t, reader)
	want := map[string]map[string]float64{
		"inbox.lock.takes":         {"lock=nightly,outcome=acquired": 2, "lock=nightly,outcome=not_acquired": 1},
		"inbox.lock.waits":         {"lock=nightly,outcome=acquired": 1, "lock=nightly,outcome=not_acquired": 1},
		"inbox.lock.wait.duration": {"lock=nightly,outcome=acquired": 1, "lock=nightly,outcome=not_acquired": 1},
	}
	for name, points := range want {
		for a, v := range points {
			if got[name][a] != v {
				t.Errorf("%s{%s} = %v, want %v (all: %v)", name, a, got[name][a], v, got[name])
			}
		}
	}
	if w := got["inbox.lock.wait.duration.sum"]["lock=nightly,outcome=not_acquired"]; w < 0.05 {
		t.Errorf("the take that waited 50ms and failed recorded %vs", w)
	}
}

// Three runs of a schedule's handler: ok, failed, panicked; runs, lag and
// spans say so.
func TestScheduleHandlerMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewSpanRecorder()
	calls := 0
	h, err := inboxotel.ScheduleHandler(func(ctx context.Context, r schedule.Run) error {
		calls++
		switch calls {
		case 2:
			return errors.New("export failed")
		case 3:
			panic("boom")
		}
		return nil
	}, inboxotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))), inboxotel.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))))
	if err != nil {
		t.Fatal(err)
	}
	run := schedule.Run{Schedule: "nightly", FiredAt: time.Now().Add(-2 * time.Second), Workers: 1}
	for range 3 {
		func() {
			defer func() { _ = recover() }()
			_ = h(context.Background(), run)
		}()
	}
	got := collect(t, reader)
	if got["inbox.schedule.runs"]["outcome=ok,schedule=nightly"] != 1 || got["inbox.schedule.runs"]["outcome=failed,schedule=nightly"] != 2 {
		t.Errorf("runs = %v, want 1 ok and 2 failed", got["inbox.schedule.runs"])
	}
	if n, sum := got["inbox.schedule.lag"]["schedule=nightly"], got["inbox.schedule.lag.sum"]["schedule=nightly"]; n != 3 || sum < 6 {
		t.Errorf("lag: %v runs summing %vs, want 3 of at least 2s each", n, sum)
	}
	if n := len(spans.Ended()); n != 3 {
		t.Errorf("%d spans, want 3", n)
	}
}
