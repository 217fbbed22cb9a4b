package inboxotel_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxotel"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/migrations"
)

type tracedJob struct {
	ID          int64          `db:"id" inbox:"id,generated"`
	LockedUntil *time.Time     `db:"locked_until" inbox:"locked_until"`
	Payload     []byte         `db:"payload" inbox:"payload"`
	Trace       sql.NullString `db:"traceparent" inbox:"trace"`
}

// A row published inside a producer's span, one a plain-SQL producer wrote
// with the traceparent of another span, and one published with no span:
// the first two handling spans link to their producer's trace and span id,
// the third has no link.
func TestHandlingSpanLinksToProducer(t *testing.T) {
	for name, url := range map[string]func(testing.TB) string{"sqlite": inboxtest.SQLite, "postgres": inboxtest.Postgres} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b, err := inbox.Open(url(t), inbox.WithTraceContext(inboxotel.Traceparent))
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if err := migrations.Apply(ctx, b.DB(), "jobs"); err != nil {
				t.Fatal(err)
			}
			if _, err := b.DB().Exec("ALTER TABLE jobs ADD COLUMN traceparent TEXT"); err != nil {
				t.Fatal(err)
			}
			spans := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
			tracer := tp.Tracer("producer")
			q := inbox.MustQueue[tracedJob]("jobs")

			pctx, producer := tracer.Start(ctx, "publish")
			if _, err := inbox.Publish(pctx, b, q, tracedJob{Payload: []byte("published")}); err != nil {
				t.Fatal(err)
			}
			producer.End()
			sctx, sqlProducer := tracer.Start(ctx, "plain sql")
			if _, err := b.DB().Exec("INSERT INTO jobs (payload, traceparent) VALUES ('sql', $1)", inboxotel.Traceparent(sctx)); err != nil {
				t.Fatal(err)
			}
			sqlProducer.End()
			if _, err := inbox.Publish(ctx, b, q, tracedJob{Payload: []byte("untraced")}); err != nil {
				t.Fatal(err)
			}

			svc := inbox.NewService("invoices", "1", b)
			svc.Signals = false
			ev := inboxtest.NewEvents(t)
			if _, err := inbox.Handle(svc, q, func(context.Context, tracedJob) error { return nil }, ev.Observe()); err != nil {
				t.Fatal(err)
			}
			if err := inboxotel.Instrument(svc, inboxotel.WithTracerProvider(tp), inboxotel.NoRowGauge()); err != nil {
				t.Fatal(err)
			}
			rctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- svc.Run(rctx) }()
			ev.Wait("3 rows settled", func(e []inbox.Event) bool { return len(e) == 3 })
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}

			want := map[int64]trace.SpanContext{1: producer.SpanContext(), 2: sqlProducer.SpanContext()}
			handlings := 0
			for _, s := range spans.Ended() {
				if s.Name() != "inbox.handle jobs" {
					continue
				}
				handlings++
				var id int64
				for _, kv := range s.Attributes() {
					if kv.Key == "inbox.id" {
						id = kv.Value.AsInt64()
					}
				}
				links := s.Links()
				w, linked := want[id]
				if !linked {
					if len(links) != 0 {
						t.Errorf("row %d published with no span: links %v, want none", id, links)
					}
					continue
				}
				if len(links) != 1 || links[0].SpanContext.TraceID() != w.TraceID() || links[0].SpanContext.SpanID() != w.SpanID() {
					t.Errorf("row %d: links %v, want one to trace %s span %s", id, links, w.TraceID(), w.SpanID())
				}
				if s.SpanContext().TraceID() == w.TraceID() {
					t.Errorf("row %d: the handling span is in the producer's trace; want a trace of its own with a link", id)
				}
			}
			if handlings != 3 {
				t.Errorf("%d handling spans, want 3", handlings)
			}
		})
	}
}
