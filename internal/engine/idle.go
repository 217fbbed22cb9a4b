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
	now  chan struct{}   // closed when the loop next reports idle
	poll time.Time       // when the armed poll fires; zero when none is armed
	wake <-chan struct{} // the loop's wakes, pending ones unread
}

// NewIdle returns the idle state of a subscription on clk, not idle.
func NewIdle(clk clock.Clock) *Idle { return &Idle{clock: clk, now: make(chan struct{})} }

// set records whether the loop is idle.
func (s *Idle) set(idle bool, poll time.Time, wake <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.poll, s.wake = poll, wake
	// Every idle report wakes Wait: a wake taken while the loop stayed
	// idle (during a claim backoff) must not leave a waiter asleep.
	if idle {
		close(s.now)
		s.now = make(chan struct{})
	}
	s.idle = idle
}

// Wait blocks until the loop is idle, or ctx ends.
func (s *Idle) Wait(ctx context.Context) error {
	for {
		s.mu.Lock()
		// A poll that fired or a wake that arrived, not yet taken by the
		// loop, will make it claim: not idle yet.
		if s.idle && (s.poll.IsZero() || s.clock.Now().Before(s.poll)) && len(s.wake) == 0 {
			s.mu.Unlock()
			return nil
		}
		ch := s.now
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}
