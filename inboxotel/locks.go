package inboxotel

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/sqlinbox/sqlinbox/lock"
)

// Locker is a lock.Locker whose Take is measured:
//
//	inbox.lock.takes          counter, by lock and outcome (acquired, not_acquired, error)
//	inbox.lock.waits          counter of takes that may wait (lock.Wait, or lock.Tries above one), by lock and outcome
//	inbox.lock.wait.duration  histogram (s) of the time those takes spent, by lock and outcome
//
// The lock attribute is the lock's name: keep names few (a name per row
// makes a series per row). Every other method is the Locker's own.
type Locker struct {
	*lock.Locker
	takes, waits metric.Int64Counter
	wait         metric.Float64Histogram
}

// NewLocker measures l's takes with cfg's meter provider.
func NewLocker(l *lock.Locker, opts ...Option) (*Locker, error) {
	cfg, rerr := resolve(opts)
	if rerr != nil {
		return nil, rerr
	}
	m := cfg.meterProvider().Meter(Scope)
	ml := &Locker{Locker: l}
	var err, e error
	ml.takes, e = m.Int64Counter("inbox.lock.takes", metric.WithDescription("Lock takes, by lock and outcome."))
	err = errors.Join(err, e)
	ml.waits, e = m.Int64Counter("inbox.lock.waits", metric.WithDescription("Lock takes that may wait, by lock and outcome."))
	err = errors.Join(err, e)
	ml.wait, e = m.Float64Histogram("inbox.lock.wait.duration", metric.WithUnit("s"), metric.WithDescription("Time spent by lock takes that may wait, by lock and outcome."))
	err = errors.Join(err, e)
	if err != nil {
		return nil, fmt.Errorf("inboxotel: %w", err)
	}
	return ml, nil
}

// Take is lock.Locker.Take, measured.
func (l *Locker) Take(ctx context.Context, name string, opts ...lock.TakeOption) (lock.Hold, bool, error) {
	start := time.Now()
	h, ok, err := l.Locker.Take(ctx, name, opts...)
	outcome := "acquired"
	switch {
	case errors.Is(err, lock.ErrNotAcquired), err == nil && !ok:
		outcome = "not_acquired"
	case err != nil:
		outcome = "error"
	}
	attrs := metric.WithAttributes(attribute.String("lock", name), attribute.String("outcome", outcome))
	l.takes.Add(ctx, 1, attrs)
	if lock.Waits(opts...) {
		l.waits.Add(ctx, 1, attrs)
		l.wait.Record(ctx, time.Since(start).Seconds(), attrs)
	}
	return h, ok, err
}
