package clock

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"
)

// Fake is a clock that moves only when told to. Timers made on it fire when
// Advance or Set carries the clock past their deadline. Tests wait for the
// code under test to arm its timers with WaitTimers before they advance, so
// no test sleeps.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*fakeTimer
	changed chan struct{} // closed and replaced whenever timers change
}

// NewFake returns a fake clock showing start.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, changed: make(chan struct{})}
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTimer makes a timer that fires when the fake time reaches now+d.
func (f *Fake) NewTimer(d time.Duration) Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{f: f, at: f.now.Add(d), c: make(chan time.Time, 1)}
	if d <= 0 {
		t.c <- f.now
		return t
	}
	f.timers = append(f.timers, t)
	f.signal()
	return t
}

// Advance moves the clock forward by d, firing every timer it passes.
func (f *Fake) Advance(d time.Duration) {
	f.Set(f.Now().Add(d))
}

// Set moves the clock to t (never backwards), firing every timer it passes.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t.Before(f.now) {
		return
	}
	f.now = t
	kept := f.timers[:0]
	for _, tm := range f.timers {
		if !tm.at.After(t) {
			tm.c <- t
			continue
		}
		kept = append(kept, tm)
	}
	clear(f.timers[len(kept):])
	f.timers = kept
	f.signal()
}

// Pending returns how many timers wait to fire.
func (f *Fake) Pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// Next returns the deadline of the nearest pending timer, if any.
func (f *Fake) Next() (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.timers) == 0 {
		return time.Time{}, false
	}
	at := make([]time.Time, len(f.timers))
	for i, t := range f.timers {
		at[i] = t.at
	}
	sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
	return at[0], true
}

// WaitNext blocks until the earliest pending timer is due at at, or ctx is
// done: the code under test has armed its next timer for that time.
func (f *Fake) WaitNext(ctx context.Context, at time.Time) error {
	for {
		f.mu.Lock()
		due := false
		for _, t := range f.timers {
			if t.at.Before(at) {
				due = false
				break
			}
			if t.at.Equal(at) {
				due = true
			}
		}
		ch := f.changed
		f.mu.Unlock()
		if due {
			return nil
		}
		select {
		case <-ctx.Done():
			next, ok := f.Next()
			return fmt.Errorf("the next timer is due at %v (any pending: %v), not %v: %w", next, ok, at, ctx.Err())
		case <-ch:
		}
	}
}

// WaitTimers blocks until at least n timers are pending, or ctx is done.
func (f *Fake) WaitTimers(ctx context.Context, n int) error {
	for {
		f.mu.Lock()
		if len(f.timers) >= n {
			f.mu.Unlock()
			return nil
		}
		ch := f.changed
		f.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

func (f *Fake) signal() {
	close(f.changed)
	f.changed = make(chan struct{})
}

type fakeTimer struct {
	f  *Fake
	at time.Time
	c  chan time.Time
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	for i, tm := range t.f.timers {
		if tm == t {
			t.f.timers = append(t.f.timers[:i], t.f.timers[i+1:]...)
			t.f.signal()
			return true
		}
	}
	return false
}
