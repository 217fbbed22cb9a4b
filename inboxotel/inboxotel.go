// Package inboxotel instruments an inbox.Service with the OpenTelemetry
// API: metrics of its handlings, claims, workers and queues, and a span per
// handling. It is a module of its own, so OpenTelemetry reaches only the
// programs that import it.
//
//	svc := inbox.NewService("invoices", "1.0.0", broker)
//	inbox.Handle(svc, queue, render, inbox.Workers(8))
//	err := inboxotel.Instrument(svc) // the global providers
//
// Metrics (attribute queue: the table, or table/group):
//
//	inbox.handlings           counter, by queue and outcome (acked, retried, parked, snoozed, lost, released, failed, canceled)
//	inbox.claims              counter of claim statements, by queue
//	inbox.settlement.failures counter of settlements that failed (outcome failed), by queue
//	inbox.handling.duration   histogram (s) of handler start to settlement, by queue and outcome
//	inbox.queue.wait          histogram (s) of created_at to claim, by queue (queues whose struct tags created_at)
//	inbox.claim.rows          histogram of rows a claim took, by queue
//	inbox.rows                gauge of rows by queue and state (available, held, delayed, waiting, parked), read at collection
//	inbox.workers.busy        gauge of rows claimed and not yet settled, by queue
//	inbox.workers.total       gauge of workers, by queue
//	inbox.limit.refused       counter of rows given back unstarted because another claimer took
//	                          their key's last slot first, by queue (queues with inbox.Limit or inbox.Rate)
//	inbox.limit.waiting       gauge of rows waiting on their key's inbox.Limit or inbox.Rate
//	                          (available, its slots all held), by queue, read at collection
//
// Locks and schedules: NewLocker measures a lock.Locker's takes, and
// ScheduleHandler a schedule's runs (see each).
//
// Spans: one per handling, "inbox.handle <queue>", from the handler's start
// to its settlement, with attributes inbox.queue, inbox.id, inbox.attempt and
// inbox.outcome, and an error status when the handler failed. The handler's
// context carries it, so the handler's own spans are its children. A queue
// whose struct tags a trace column (inbox:"trace") links each span to the
// producer's span whose W3C traceparent the row carries: see Traceparent.
package inboxotel

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sqlinbox/sqlinbox/inbox"
)

// Scope is the instrumentation scope's name.
const Scope = "github.com/sqlinbox/sqlinbox/inboxotel"

// Option configures Instrument, NewLocker and ScheduleHandler. A value out
// of its bound makes them fail with an error wrapping ErrInvalid that names
// the option, the value and the bound.
type Option func(*settings) error

// ErrInvalid is inbox.ErrInvalid, the module's one error of refused input.
var ErrInvalid = inbox.ErrInvalid

type settings struct {
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
	CountLimit     int
	NoRowGauge     bool
}

// WithMeterProvider makes the meter. Default: otel.GetMeterProvider().
// Bound: not nil.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(s *settings) error {
		if mp == nil {
			return fmt.Errorf("inboxotel: %w: WithMeterProvider(nil); give a provider, or leave the option out for otel.GetMeterProvider()", ErrInvalid)
		}
		s.MeterProvider = mp
		return nil
	}
}

// WithTracerProvider makes the tracer. Default: otel.GetTracerProvider().
// Bound: not nil.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(s *settings) error {
		if tp == nil {
			return fmt.Errorf("inboxotel: %w: WithTracerProvider(nil); give a provider, or leave the option out for otel.GetTracerProvider()", ErrInvalid)
		}
		s.TracerProvider = tp
		return nil
	}
}

// CountLimit bounds the rows the inbox.rows gauge reads per queue at each
// collection (see inbox.Operator.CountLimit). Default:
// inbox.DefaultCountLimit. Bound: at least 1.
func CountLimit(n int) Option {
	return func(s *settings) error {
		if n < 1 {
			return fmt.Errorf("inboxotel: %w: CountLimit(%d); give at least 1, or leave the option out for the default %d", ErrInvalid, n, inbox.DefaultCountLimit)
		}
		s.CountLimit = n
		return nil
	}
}

// NoRowGauge leaves out the gauges that query each queue's table at each
// collection: inbox.rows, and inbox.limit.waiting. Default: they are kept.
func NoRowGauge() Option {
	return func(s *settings) error { s.NoRowGauge = true; return nil }
}

// resolve applies opts over the defaults.
func resolve(opts []Option) (settings, error) {
	var s settings
	for _, o := range opts {
		if err := o(&s); err != nil {
			return settings{}, err
		}
	}
	return s, nil
}

func (c settings) meterProvider() metric.MeterProvider {
	if c.MeterProvider == nil {
		return otel.GetMeterProvider()
	}
	return c.MeterProvider
}

func (c settings) tracerProvider() trace.TracerProvider {
	if c.TracerProvider == nil {
		return otel.GetTracerProvider()
	}
	return c.TracerProvider
}

// Instrument adds metrics and spans to every subscription of svc. Call it
// after the subscriptions are added and before Run. The observable gauges
// (workers, and rows by state, which query each table) are unregistered
// when svc's Run returns: once it has, collections read nothing of svc.
func Instrument(svc *inbox.Service, opts ...Option) error {
	cfg, rerr := resolve(opts)
	if rerr != nil {
		return rerr
	}
	m := cfg.meterProvider().Meter(Scope)
	in := &instruments{tracer: cfg.tracerProvider().Tracer(Scope), busy: map[*inbox.Subscription]*atomic.Int64{}}
	var err, e error
	in.handlings, e = m.Int64Counter("inbox.handlings", metric.WithDescription("Rows handled, by queue and outcome."))
	err = errors.Join(err, e)
	in.claims, e = m.Int64Counter("inbox.claims", metric.WithDescription("Claim statements sent, by queue."))
	err = errors.Join(err, e)
	in.failures, e = m.Int64Counter("inbox.settlement.failures", metric.WithDescription("Settlements (ack, retry, park) that failed; the row comes back after its lease."))
	err = errors.Join(err, e)
	in.duration, e = m.Float64Histogram("inbox.handling.duration", metric.WithUnit("s"), metric.WithDescription("Handler start to settlement, by queue and outcome."))
	err = errors.Join(err, e)
	in.wait, e = m.Float64Histogram("inbox.queue.wait", metric.WithUnit("s"), metric.WithDescription("A row's created_at to its claim, by queue."))
	err = errors.Join(err, e)
	in.rows, e = m.Int64Histogram("inbox.claim.rows", metric.WithDescription("Rows one claim took, by queue."),
		metric.WithExplicitBucketBoundaries(0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000))
	err = errors.Join(err, e)
	if err != nil {
		return fmt.Errorf("inboxotel: %w", err)
	}
	subs := svc.Subscriptions()
	for _, s := range subs {
		in.busy[s] = &atomic.Int64{}
	}
	reg, err := in.gauges(m, svc, subs, cfg)
	if err != nil {
		return fmt.Errorf("inboxotel: %w", err)
	}
	// The gauges' callback reads the tables at each collection: it ends
	// with the service.
	stopped := func() {
		if err := reg.Unregister(); err != nil {
			otel.Handle(fmt.Errorf("inboxotel: service %q: unregistering the gauges: %w", svc.Name, err))
		}
	}
	svc.AddHooks(inbox.Hooks{Handled: in.handled, Claimed: in.claimed, Started: in.started, Stopped: stopped})
	return nil
}

type instruments struct {
	tracer                      trace.Tracer
	handlings, claims, failures metric.Int64Counter
	duration, wait              metric.Float64Histogram
	rows                        metric.Int64Histogram
	busy                        map[*inbox.Subscription]*atomic.Int64
	spans                       sync.Map // spanKey -> trace.Span, from the handler's start to its settlement
	attrsMu                     sync.Mutex
	attrs                       map[attrKey]metric.MeasurementOption
}

type spanKey struct {
	sub     *inbox.Subscription
	id      int64
	attempt int
}

// started opens a handling's span in the handler's context, linked to the
// producer's span when the row carries its traceparent; handled ends it.
func (in *instruments) started(s *inbox.Subscription, ctx context.Context, ev inbox.StartEvent) context.Context {
	queue := queueName(s)
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String("inbox.queue", queue), attribute.Int64("inbox.id", ev.ID), attribute.Int("inbox.attempt", ev.Attempt))}
	if producer := producerSpan(ev.Traceparent); producer.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: producer}))
	}
	ctx, span := in.tracer.Start(ctx, "inbox.handle "+queue, opts...)
	in.spans.Store(spanKey{s, ev.ID, ev.Attempt}, span)
	return ctx
}

// Traceparent returns the W3C traceparent of ctx's span, "" when ctx
// carries none. Give it to the broker of producers, and publishes write it
// into the column a queue's struct tags inbox:"trace":
//
//	b, err := inbox.Open(url, inbox.WithTraceContext(inboxotel.Traceparent))
//
// Each handling's span then links to the span the row was published in.
// A plain-SQL producer writes the same string (version-traceid-spanid-flags).
func Traceparent(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c.Get("traceparent")
}

// producerSpan parses a traceparent; an empty or malformed one gives an
// invalid span context.
func producerSpan(traceparent string) trace.SpanContext {
	if traceparent == "" {
		return trace.SpanContext{}
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": traceparent})
	return trace.SpanContextFromContext(ctx)
}

type attrKey struct {
	queue   string
	outcome inbox.Outcome
}

// queueName is the queue attribute of a subscription.
func queueName(s *inbox.Subscription) string {
	q := s.Queue()
	if q.Group == "" {
		return q.Table
	}
	return q.Table + "/" + q.Group
}

// opts returns the (cached) attribute set of a queue and outcome.
func (in *instruments) opts(queue string, outcome inbox.Outcome) metric.MeasurementOption {
	k := attrKey{queue, outcome}
	in.attrsMu.Lock()
	defer in.attrsMu.Unlock()
	if o, ok := in.attrs[k]; ok {
		return o
	}
	if in.attrs == nil {
		in.attrs = map[attrKey]metric.MeasurementOption{}
	}
	kv := []attribute.KeyValue{attribute.String("queue", queue)}
	if outcome != "" {
		kv = append(kv, attribute.String("outcome", string(outcome)))
	}
	o := metric.WithAttributeSet(attribute.NewSet(kv...))
	in.attrs[k] = o
	return o
}

func (in *instruments) handled(s *inbox.Subscription, e inbox.Event) {
	ctx := context.Background()
	queue := queueName(s)
	in.busy[s].Add(-1)
	o := in.opts(queue, e.Outcome)
	in.handlings.Add(ctx, 1, o)
	if e.Outcome == inbox.Failed {
		in.failures.Add(ctx, 1, in.opts(queue, ""))
	}
	if e.Outcome == inbox.Released {
		return // never handled: no time, no span
	}
	in.duration.Record(ctx, e.End.Sub(e.Start).Seconds(), o)
	var span trace.Span
	if v, ok := in.spans.LoadAndDelete(spanKey{s, e.ID, e.Attempt}); ok {
		span = v.(trace.Span)
	} else { // the handler never ran (a row that cannot be read)
		_, span = in.tracer.Start(ctx, "inbox.handle "+queue, trace.WithTimestamp(e.Start), trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(attribute.String("inbox.queue", queue), attribute.Int64("inbox.id", e.ID), attribute.Int("inbox.attempt", e.Attempt)))
	}
	span.SetAttributes(attribute.String("inbox.outcome", string(e.Outcome)))
	if e.Err != nil {
		span.RecordError(e.Err)
		span.SetStatus(codes.Error, e.Err.Error())
	}
	span.End(trace.WithTimestamp(e.End))
}

func (in *instruments) claimed(s *inbox.Subscription, c inbox.ClaimEvent) {
	ctx := context.Background()
	in.busy[s].Add(int64(c.Rows))
	o := in.opts(queueName(s), "")
	in.claims.Add(ctx, 1, o)
	if c.Err != nil {
		return
	}
	in.rows.Record(ctx, int64(c.Rows), o)
	for _, q := range c.Queued {
		in.wait.Record(ctx, q.Seconds(), o)
	}
}

// gauges registers the observable gauges: workers busy and total, and rows
// by state per queue.
func (in *instruments) gauges(m metric.Meter, svc *inbox.Service, subs []*inbox.Subscription, cfg settings) (metric.Registration, error) {
	busy, err := m.Int64ObservableGauge("inbox.workers.busy", metric.WithDescription("Rows claimed and not yet settled, by queue."))
	if err != nil {
		return nil, err
	}
	total, err := m.Int64ObservableGauge("inbox.workers.total", metric.WithDescription("Workers, by queue."))
	if err != nil {
		return nil, err
	}
	refused, err := m.Int64ObservableCounter("inbox.limit.refused", metric.WithDescription("Rows a claim took and gave back unstarted because another claimer took their key's last slot of its Limit or Rate first, by queue (subscriptions with a Limit or a Rate only; rows whose key's slots were all held before the claim are not taken at all)."))
	if err != nil {
		return nil, err
	}
	insts := []metric.Observable{busy, total, refused}
	var rows metric.Int64ObservableGauge
	if !cfg.NoRowGauge {
		rows, err = m.Int64ObservableGauge("inbox.rows", metric.WithDescription("Rows by queue and state (available, held, delayed, waiting, parked), of the first CountLimit rows in id order."))
		if err != nil {
			return nil, err
		}
		insts = append(insts, rows)
	}
	waiting, err := m.Int64ObservableGauge("inbox.limit.waiting", metric.WithDescription("Rows waiting on their key's Limit or Rate: available, of a key value whose slots are all held, so claims pass over them; by queue, of the first CountLimit such rows in id order (subscriptions with a Limit or a Rate only)."))
	if err != nil {
		return nil, err
	}
	insts = append(insts, waiting)
	op := inbox.NewOperator(svc.Broker())
	if cfg.CountLimit > 0 {
		op.CountLimit = cfg.CountLimit
	}
	return m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		workers, busyBy := map[string]int64{}, map[string]int64{}
		refusedBy := map[string]int64{}
		refs := map[string]inbox.QueueRef{}
		for _, s := range subs {
			q := queueName(s)
			workers[q] += int64(s.Workers())
			busyBy[q] += in.busy[s].Load()
			refs[q] = s.Queue()
			_, n := s.Limit()
			_, r, _ := s.Rate()
			if n > 0 || r > 0 {
				refusedBy[q] += s.Stats().LimitRefused
			}
		}
		for q, n := range refusedBy {
			o.ObserveInt64(refused, n, metric.WithAttributes(attribute.String("queue", q)))
		}
		var errs []error
		if !cfg.NoRowGauge {
			errs = append(errs, observeWaiting(ctx, o, waiting, op, subs))
		}
		for q := range workers {
			qa := attribute.String("queue", q)
			o.ObserveInt64(total, workers[q], metric.WithAttributes(qa))
			o.ObserveInt64(busy, busyBy[q], metric.WithAttributes(qa))
			if cfg.NoRowGauge {
				continue
			}
			st, err := op.State(ctx, refs[q])
			if err != nil {
				errs = append(errs, err)
				continue
			}
			for state, n := range map[string]int64{inbox.StateAvailable: st.Available, inbox.StateHeld: st.Held, inbox.StateDelayed: st.Delayed, inbox.StateWaiting: st.Waiting, inbox.StateParked: st.Parked} {
				o.ObserveInt64(rows, n, metric.WithAttributes(qa, attribute.String("state", state)))
			}
		}
		return errors.Join(errs...)
	}, insts...)
}

// observeWaiting observes the rows waiting on each limited queue's limit.
func observeWaiting(ctx context.Context, o metric.Observer, waiting metric.Int64ObservableGauge, op *inbox.Operator, subs []*inbox.Subscription) error {
	by := map[string]int64{}
	seen := map[[2]string]bool{} // subscriptions of one queue and column count the same rows
	var errs []error
	for _, s := range subs {
		col, n := s.Limit()
		if n == 0 {
			col, n, _ = s.Rate()
		}
		if n == 0 || seen[[2]string{queueName(s), col}] {
			continue
		}
		seen[[2]string{queueName(s), col}] = true
		w, err := op.LimitWaiting(ctx, s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		by[queueName(s)] += w
	}
	for q, n := range by {
		o.ObserveInt64(waiting, n, metric.WithAttributes(attribute.String("queue", q)))
	}
	return errors.Join(errs...)
}
