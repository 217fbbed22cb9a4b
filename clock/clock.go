// Package clock is where every time the library compares or writes comes from.
//
// Three clocks: Host (the default) reads the host's clock, Database asks the
// database for now() inside every statement, and Fake moves only when a test
// says so. Code that needs a time takes a Clock; SQL that needs a time takes
// it as a parameter from that Clock, or, with Database, uses the database's
// own now(), so a fake clock reaches all the way into SQL.
//
//	c := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
//	c.Advance(time.Minute) // leases, polls and timers move by a minute
package clock

import (
	"context"
	"sync"
	"time"
)

// Clock tells the time and makes timers that follow it.
type Clock interface {
	// Now is the current time on this clock.
	Now() time.Time
	// NewTimer makes a timer that fires once when d has passed on this clock.
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer on a Clock.
type Timer interface {
	// C delivers the clock's time once the timer fires.
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it was pending.
	Stop() bool
}

// Host reads the host's clock. Hosts that share a table must keep their
// clocks well within a lease of each other; where they cannot, use Database.
type Host struct{}

// Now returns time.Now().
func (Host) Now() time.Time { return time.Now() }

// NewTimer returns a real timer.
func (Host) NewTimer(d time.Duration) Timer { return hostTimer{time.NewTimer(d)} }

type hostTimer struct{ t *time.Timer }

func (h hostTimer) C() <-chan time.Time { return h.t.C }
func (h hostTimer) Stop() bool          { return h.t.Stop() }

// Database makes every statement read the database's clock (now() on
// Postgres, the SQLite engine's clock on SQLite) instead of taking a time
// from the host. Timers and Now still run on Clock (the host's when nil):
// they pace polls and lease extensions, which tolerate skew; the comparisons
// that decide who holds a row are made by the database alone.
type Database struct {
	// Clock paces timers; nil means Host. Tests put a Fake here to drive
	// polls while the database keeps the time.
	Clock Clock
}

// Now reads the pacing clock.
func (d Database) Now() time.Time { return OrHost(d.Clock).Now() }

// NewTimer makes a timer on the pacing clock.
func (d Database) NewTimer(t time.Duration) Timer { return OrHost(d.Clock).NewTimer(t) }

// InDatabase reports whether statements should take their time from the
// database's own clock rather than from c.Now.
func InDatabase(c Clock) bool {
	_, ok := c.(Database)
	if !ok {
		_, ok = c.(*Database)
	}
	return ok
}

// OnHost reports whether c's timers run on the host's clock: Host (or nil),
// or Database pacing on Host.
func OnHost(c Clock) bool {
	switch c := OrHost(c).(type) {
	case Host:
		return true
	case Database:
		return OnHost(c.Clock)
	case *Database:
		return OnHost(c.Clock)
	}
	return false
}

// Sleep waits d on clock c, or until ctx is done, whichever is first.
func Sleep(ctx context.Context, c Clock, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}

// AfterFunc calls f in a goroutine of its own once d has passed on clock c,
// unless the returned timer is stopped first. The timer's C is nil. On Host
// (and Database over Host) it is time.AfterFunc, which holds no goroutine
// while it waits; on another clock a goroutine waits on one of its timers.
func AfterFunc(c Clock, d time.Duration, f func()) Timer {
	switch c := OrHost(c).(type) {
	case Host:
		return funcTimer{time.AfterFunc(d, f).Stop}
	case Database:
		return AfterFunc(c.Clock, d, f)
	case *Database:
		return AfterFunc(c.Clock, d, f)
	default:
		t := c.NewTimer(d)
		stop := make(chan struct{})
		var once sync.Once
		go func() {
			select {
			case <-t.C():
				f()
			case <-stop:
			}
		}()
		return funcTimer{func() bool {
			pending := t.Stop()
			once.Do(func() { close(stop) })
			return pending
		}}
	}
}

type funcTimer struct{ stop func() bool }

func (funcTimer) C() <-chan time.Time { return nil }
func (t funcTimer) Stop() bool        { return t.stop() }

// OrHost returns c, or Host when c is nil: a nil Clock means the default.
func OrHost(c Clock) Clock {
	if c == nil {
		return Host{}
	}
	return c
}
