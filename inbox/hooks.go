package inbox

import (
	"context"
	"database/sql"
	"reflect"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/claim"
	"github.com/sqlinbox/sqlinbox/internal/engine"
)

// Hooks are calls every subscription of a service makes, for metrics and
// traces (package inboxotel builds on them). Each must be quick and safe
// for concurrent use; a nil field is not called.
type Hooks struct {
	// Handled is called after each row is settled, as Observe's function
	// is (and on the same goroutines).
	Handled func(sub *Subscription, e Event)
	// Claimed is called after each claim statement, on the goroutine that
	// sent it. A claim a paused queue skips sends nothing and is not
	// reported.
	Claimed func(sub *Subscription, c ClaimEvent)
	// Started is called as each handler starts, on its worker, with the
	// handler's context; the context it returns is the handler's (one that
	// carries a span, say). A row whose handler does not run (one that
	// cannot be read) is reported to Handled only.
	Started func(sub *Subscription, ctx context.Context, s StartEvent) context.Context
	// Stopped is called once as the service's Run returns, whether it ran
	// or failed at start (to release what the hooks' owner holds, such as
	// a metrics callback).
	Stopped func()
}

// StartEvent is one handler's start.
type StartEvent struct {
	ID int64
	// Attempt is the row's attempts as its claim left it (at least 1; 1
	// without an attempts column).
	Attempt int
	// Traceparent is the row's trace column (RoleTrace): the producer's
	// W3C traceparent, as Publish with WithTraceContext or a plain-SQL
	// producer wrote it; "" without one.
	Traceparent string
}

// ClaimEvent is one claim statement.
type ClaimEvent struct {
	Start, End time.Time // on the broker's clock
	Asked      int       // rows asked for (free workers; under a backlog a batch beyond them)
	Rows       int       // rows taken
	// Queued is how long each row taken had been in the table, from its
	// created_at to the claim; empty when the queue's struct tags no
	// created_at (the claim overwrites the row's due time, so that is not
	// known any more).
	Queued []time.Duration
	Err    error
}

// AddHooks adds hooks that every subscription of the service calls from
// Run on. Call it before Run.
func (s *Service) AddHooks(h Hooks) { s.callHooks = append(s.callHooks, h) }

// stopped calls the hooks' Stopped functions; Run defers it.
func (s *Service) stopped() {
	for _, h := range s.callHooks {
		if h.Stopped != nil {
			h.Stopped()
		}
	}
}

// startEvent reads the id, attempts and trace of a claimed value (a
// pointer to the queue's struct).
func (s *Subscription) startEvent(value any) StartEvent {
	v := reflect.ValueOf(value).Elem()
	ev := StartEvent{ID: intField(v.FieldByIndex(s.shape.byRole[RoleID].index)), Attempt: 1}
	if f := s.shape.byRole[RoleAttempts]; f != nil {
		ev.Attempt = max(int(intField(v.FieldByIndex(f.index))), 1)
	}
	if f := s.shape.byRole[RoleTrace]; f != nil {
		_, ev.Traceparent = keyArg(v.FieldByIndex(f.index))
	}
	return ev
}

func intField(v reflect.Value) int64 {
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return int64(v.Uint())
	}
	return 0
}

// reportClaims reports each claim of the subscription to the hooks'
// Claimed.
func (s *Subscription) reportClaims(hooks []Hooks) engine.ClaimMiddleware {
	return func(ctx context.Context, max int, next engine.ClaimFunc) ([]*claim.Job, error) {
		clk := s.b.clock
		start := clk.Now()
		jobs, err := next(ctx, max)
		ev := ClaimEvent{Start: start, End: clk.Now(), Asked: max, Rows: len(jobs), Err: err}
		if f := s.shape.byRole[RoleCreatedAt]; f != nil {
			for _, j := range jobs {
				if j.Value == nil {
					continue
				}
				if at := timeField(reflect.ValueOf(j.Value).Elem().FieldByIndex(f.index)); !at.IsZero() {
					ev.Queued = append(ev.Queued, start.Sub(at))
				}
			}
		}
		for _, h := range hooks {
			if h.Claimed != nil {
				h.Claimed(s, ev)
			}
		}
		return jobs, err
	}
}

// timeField reads a time.Time, *time.Time or sql.NullTime field.
func timeField(v reflect.Value) time.Time {
	switch p := v.Addr().Interface().(type) {
	case *time.Time:
		return *p
	case **time.Time:
		if *p != nil {
			return **p
		}
	case *sql.NullTime:
		if p.Valid {
			return p.Time
		}
	}
	return time.Time{}
}

// Name is the subscription's name (Name; default the table, and group).
func (s *Subscription) Name() string { return s.cfg.name }

// Workers is how many handlers the subscription runs at once.
func (s *Subscription) Workers() int { return s.cfg.workers }

// Queue is the subscription's queue as an Operator names it: its table,
// group, column roles and lease.
func (s *Subscription) Queue() QueueRef {
	return QueueRef{Table: s.table, Group: s.group, Roles: s.roles(), Lease: s.cfg.lease}
}
