package inboxotel_test

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxotel"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/migrations"
)

type job struct {
	ID          int64          `db:"id" inbox:"id,generated"`
	LockedUntil *time.Time     `db:"locked_until" inbox:"locked_until"`
	Payload     []byte         `db:"payload" inbox:"payload"`
	Attempts    int            `db:"attempts" inbox:"attempts"`
	LastError   sql.NullString `db:"last_error" inbox:"last_error"`
	CreatedAt   time.Time      `db:"created_at" inbox:"created_at"`
}

// A run of 10 rows (7 acked, 3 failing into park at their first attempt)
// and 2 rows left delayed, one row waiting for one of them, read back from a ManualReader: every counter,
// histogram count and gauge matches what the run did, and every handling
// has its span.
func TestMetricsMatchTheRun(t *testing.T) {
	for name, url := range map[string]func(testing.TB) string{"sqlite": inboxtest.SQLite, "postgres": inboxtest.Postgres} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b, err := inbox.Open(url(t), inbox.PollInterval(50*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if err := migrations.Apply(ctx, b.DB(), "jobs"); err != nil {
				t.Fatal(err)
			}
			if err := migrations.ApplyDependencies(ctx, b.DB(), "jobs", "id"); err != nil {
				t.Fatal(err)
			}
			reader := sdkmetric.NewManualReader()
			spans := tracetest.NewSpanRecorder()
			svc := inbox.NewService("invoices", "1", b)
			svc.Signals = false
			q := inbox.MustQueue[job]("jobs")
			ev := inboxtest.NewEvents(t)
			var inSpan atomic.Int64 // handlings whose context carries their span
			sub, err := inbox.Handle(svc, q, func(ctx context.Context, j job) error {
				if trace.SpanFromContext(ctx).SpanContext().IsValid() {
					inSpan.Add(1)
				}
				if string(j.Payload) == "bad" {
					return errors.New("bad row")
				}
				return nil
			}, inbox.Workers(4), inbox.MaxAttempts(1), ev.Observe())
			if err != nil {
				t.Fatal(err)
			}
			if err := inboxotel.Instrument(svc, inboxotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))), inboxotel.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)))); err != nil {
				t.Fatal(err)
			}
			for i := range 10 {
				p := "ok"
				if i%4 == 1 {
					p = "bad"
				}
				if _, err := inbox.Publish(ctx, b, q, job{Payload: []byte(p)}); err != nil {
					t.Fatal(err)
				}
			}
			var later int64
			for range 2 {
				if later, err = inbox.Publish(ctx, b, q, job{Payload: []byte("later")}, inbox.Delay(time.Hour)); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := inbox.Publish(ctx, b, q, job{Payload: []byte("after")}, inbox.After(later)); err != nil {
				t.Fatal(err)
			}
			rctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- svc.Run(rctx) }()
			ev.Wait("10 rows settled", func(e []inbox.Event) bool { return len(e) == 10 })
			sub.WaitIdle(ctx)

			collect := func() map[string]map[string]int64 {
				var rm metricdata.ResourceMetrics
				if err := reader.Collect(ctx, &rm); err != nil {
					t.Fatal(err)
				}
				got := map[string]map[string]int64{} // metric -> attributes -> value (sum, count or gauge)
				for _, sm := range rm.ScopeMetrics {
					for _, m := range sm.Metrics {
						got[m.Name] = map[string]int64{}
						switch d := m.Data.(type) {
						case metricdata.Sum[int64]:
							for _, p := range d.DataPoints {
								got[m.Name][attrs(p.Attributes)] = p.Value
							}
						case metricdata.Gauge[int64]:
							for _, p := range d.DataPoints {
								got[m.Name][attrs(p.Attributes)] = p.Value
							}
						case metricdata.Histogram[float64]:
							for _, p := range d.DataPoints {
								got[m.Name][attrs(p.Attributes)] = int64(p.Count)
							}
						case metricdata.Histogram[int64]:
							for _, p := range d.DataPoints {
								got[m.Name][attrs(p.Attributes)] = int64(p.Count)
								got[m.Name+".sum"] = map[string]int64{attrs(p.Attributes): p.Sum}
							}
						}
					}
				}
				return got
			}
			// A claim that ends while Collect reads one instrument after
			// another (the idle poll's) is in one and not yet in the
			// other: read again.
			got := collect()
			for range 10 {
				if got["inbox.claims"]["queue=jobs"] == got["inbox.claim.rows"]["queue=jobs"] {
					break
				}
				got = collect()
			}
			want := map[string]map[string]int64{
				"inbox.handlings":         {"outcome=acked,queue=jobs": 7, "outcome=parked,queue=jobs": 3},
				"inbox.handling.duration": {"outcome=acked,queue=jobs": 7, "outcome=parked,queue=jobs": 3},
				"inbox.queue.wait":        {"queue=jobs": 10},
				"inbox.claim.rows.sum":    {"queue=jobs": 10},
				"inbox.workers.total":     {"queue=jobs": 4},
				"inbox.workers.busy":      {"queue=jobs": 0},
				"inbox.rows":              {"queue=jobs,state=available": 0, "queue=jobs,state=held": 0, "queue=jobs,state=delayed": 2, "queue=jobs,state=waiting": 1, "queue=jobs,state=parked": 3},
			}
			for name, points := range want {
				for a, v := range points {
					if got[name][a] != v {
						t.Errorf("%s{%s} = %d, want %d (all: %v)", name, a, got[name][a], v, got[name])
					}
				}
			}
			claims := got["inbox.claims"]["queue=jobs"]
			if claims < 1 || claims != got["inbox.claim.rows"]["queue=jobs"] {
				t.Errorf("inbox.claims = %d, inbox.claim.rows count = %d: want one claim recorded per claim, at least one", claims, got["inbox.claim.rows"]["queue=jobs"])
			}
			ended := spans.Ended()
			if len(ended) != 10 {
				t.Fatalf("%d spans, want 10", len(ended))
			}
			outcomes := map[string]int{}
			for _, s := range ended {
				for _, kv := range s.Attributes() {
					if kv.Key == "inbox.outcome" {
						outcomes[kv.Value.AsString()]++
					}
				}
			}
			if outcomes["acked"] != 7 || outcomes["parked"] != 3 {
				t.Errorf("span outcomes = %v, want 7 acked, 3 parked", outcomes)
			}
			if n := inSpan.Load(); n != 10 {
				t.Errorf("%d handlers ran in their span's context, want 10", n)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}

func attrs(s attribute.Set) string {
	out := ""
	for _, kv := range s.ToSlice() {
		if out != "" {
			out += ","
		}
		out += string(kv.Key) + "=" + kv.Value.Emit()
	}
	return out
}
