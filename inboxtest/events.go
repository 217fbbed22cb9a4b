package inboxtest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
)

// Events collects what subscriptions report through inbox.Observe, and lets
// a test wait on it:
//
//	ev := inboxtest.NewEvents(t)
//	sub, _ := inbox.Subscribe(b, q, h, ev.Observe())
//	ev.Wait("20 acks", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Acked) == 20 })
type Events struct {
	t    testing.TB
	mu   sync.Mutex
	all  []inbox.Event
	more chan struct{}
}

// NewEvents returns an empty collector.
func NewEvents(t testing.TB) *Events { return &Events{t: t, more: make(chan struct{})} }

// Observe is the subscription option that feeds the collector.
func (e *Events) Observe() inbox.SubOption { return inbox.Observe(e.add) }

func (e *Events) add(ev inbox.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, ev)
	close(e.more)
	e.more = make(chan struct{})
}

// All returns the events so far, in the order they were reported.
func (e *Events) All() []inbox.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]inbox.Event(nil), e.all...)
}

// Len is how many events were reported.
func (e *Events) Len() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.all)
}

// Wait blocks until cond holds over the events so far, and returns them;
// after Timeout it fails the test with what it waited for and what came.
func (e *Events) Wait(what string, cond func([]inbox.Event) bool) []inbox.Event {
	return e.WaitFor(Timeout, what, cond)
}

// WaitFor is Wait with a deadline of its own, for runs longer than Timeout.
func (e *Events) WaitFor(timeout time.Duration, what string, cond func([]inbox.Event) bool) []inbox.Event {
	e.t.Helper()
	deadline := time.After(timeout)
	for {
		e.mu.Lock()
		all := append([]inbox.Event(nil), e.all...)
		more := e.more
		e.mu.Unlock()
		if cond(all) {
			return all
		}
		select {
		case <-more:
		case <-deadline:
			if len(all) > 20 {
				e.t.Fatalf("waited %v for %s; %d events so far, the last: %+v", timeout, what, len(all), all[len(all)-20:])
			}
			e.t.Fatalf("waited %v for %s; events so far: %+v", timeout, what, all)
		}
	}
}

// Count counts the events with outcome o.
func Count(evs []inbox.Event, o inbox.Outcome) int {
	n := 0
	for _, e := range evs {
		if e.Outcome == o {
			n++
		}
	}
	return n
}

// RunSubscription runs one subscription (without a service) until the test
// ends or stop is called; it fails the test if Run returns an error or does
// not return within Timeout of the stop.
func RunSubscription(t testing.TB, sub *inbox.Subscription) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("inboxtest: Run: %v", err)
				}
			case <-time.After(Timeout):
				t.Errorf("inboxtest: subscription did not stop within %v", Timeout)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// Idle waits until sub waits on nothing but a wake or its poll (see
// Subscription.WaitIdle), failing the test after Timeout.
func Idle(t testing.TB, sub *inbox.Subscription) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	if err := sub.WaitIdle(ctx); err != nil {
		t.Fatalf("inboxtest: subscription not idle within %v: %v", Timeout, err)
	}
}
