package engine

import (
	"context"
	"sync"
	"time"

	"github.com/sqlinbox/sqlinbox/clock"
)

// Idle is whether a subscription's loop waits on nothing but a wake, its
// poll or a stop (no claim in flight, no handler running), for tests that
// wait for it before they move a fake clock.
type Idle struct {
	clock clock.Clock

	mu   sync.Mutex
	idle bool
	now  chan struct{}   // closed when the loop next reports idle; made by Wait
	poll time.Time       // when the armed poll fires; zero when none is armed
	wake <-chan struct{} // the loop's wakes, pending ones unread
	// While the loop is parked with a poller, the poller's next poll is
	// its poll, and due is where the poller wakes it.
	poller *Poller
	due    <-chan struct{}
}

// NewIdle returns the idle state of a subscription on clk, not idle.
func NewIdle(clk clock.Clock) *Idle { return &Idle{clock: clk} }

// set records whether the loop is idle, and what would make it claim: its
// poll at poll, or the poller's next poll (when parked), or a wake on wake
// or due.
func (s *Idle) set(idle bool, poll time.Time, poller *Poller, wake, due <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.poll, s.wake, s.poller, s.due = poll, wake, poller, due
	// Every idle report wakes Wait: a wake taken while the loop stayed
	// idle (during a claim backoff) must not leave a waiter asleep.
	// Only a Wait makes the channel: tests wait, an idle subscription in
	// production would keep one for nothing.
	if idle && s.now != nil {
		close(s.now)
		s.now = nil
	}
	s.idle = idle
}

// woken records that the poller woke the loop: not idle until it says so
// again.
func (s *Idle) woken() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.idle = false
}

// Wait blocks until the loop is idle, or ctx ends.
func (s *Idle) Wait(ctx context.Context) error {
	for {
		s.mu.Lock()
		poll := s.poll
		var moved <-chan struct{}
		if s.poller != nil {
			poll, moved = s.poller.next()
		}
		// A poll that fired or a wake that arrived, not yet taken by the
		// loop, will make it claim: not idle yet. A poller's poll that
		// fired and found nothing moves its next one.
		if s.idle && (poll.IsZero() || s.clock.Now().Before(poll)) && len(s.wake) == 0 && len(s.due) == 0 {
			s.mu.Unlock()
			return nil
		}
		if s.now == nil {
			s.now = make(chan struct{})
		}
		ch := s.now
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		case <-moved:
		}
	}
}
