package inboxotel

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/sqlinbox/sqlinbox/schedule"
)

// ScheduleHandler measures the runs of a schedule's handler h; pass what
// it returns to schedule.Scheduler.Add in h's place:
//
//	inbox.schedule.runs      counter, by schedule and outcome (ok, failed: an error or a panic)
//	inbox.schedule.lag       histogram (s) of the moment (Run.FiredAt) to the run's start, by schedule
//	inbox.schedule.duration  histogram (s) of a run, by schedule and outcome
//
// and a span "inbox.schedule <name>" per run, carried by the handler's
// context, with the share's worker and instance indexes.
func ScheduleHandler(h schedule.Handler, opts ...Option) (schedule.Handler, error) {
	cfg, rerr := resolve(opts)
	if rerr != nil {
		return nil, rerr
	}
	m := cfg.meterProvider().Meter(Scope)
	tracer := cfg.tracerProvider().Tracer(Scope)
	var err, e error
	runs, e := m.Int64Counter("inbox.schedule.runs", metric.WithDescription("Schedule runs, by schedule and outcome."))
	err = errors.Join(err, e)
	lag, e := m.Float64Histogram("inbox.schedule.lag", metric.WithUnit("s"), metric.WithDescription("A moment to its run's start, by schedule."))
	err = errors.Join(err, e)
	dur, e := m.Float64Histogram("inbox.schedule.duration", metric.WithUnit("s"), metric.WithDescription("A schedule run's time, by schedule and outcome."))
	err = errors.Join(err, e)
	if err != nil {
		return nil, fmt.Errorf("inboxotel: %w", err)
	}
	return func(ctx context.Context, r schedule.Run) (err error) {
		start := time.Now()
		lag.Record(ctx, start.Sub(r.FiredAt).Seconds(), metric.WithAttributes(attribute.String("schedule", r.Schedule)))
		ctx, span := tracer.Start(ctx, "inbox.schedule "+r.Schedule, trace.WithAttributes(attribute.String("inbox.schedule", r.Schedule),
			attribute.Int("inbox.worker", r.Worker), attribute.Int("inbox.workers", r.Workers), attribute.Int("inbox.instance", r.Instance)))
		defer func() {
			p := recover()
			outcome := "ok"
			if err != nil || p != nil {
				outcome = "failed"
				span.SetStatus(codes.Error, fmt.Sprint(err, p))
			}
			attrs := metric.WithAttributes(attribute.String("schedule", r.Schedule), attribute.String("outcome", outcome))
			runs.Add(ctx, 1, attrs)
			dur.Record(ctx, time.Since(start).Seconds(), attrs)
			span.End()
			if p != nil {
				panic(p) // the scheduler logs it
			}
		}()
		return h(ctx, r)
	}, nil
}
