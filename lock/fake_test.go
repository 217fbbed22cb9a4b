package lock_test

import (
	"context"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/lock"
)

// A waiter sleeps until the nearest holder's expiry, not a retry delay
// sooner and not a poll later: with a fake clock nothing moves until the
// test advances it, and the waiter's one timer is set for the expiry.
func TestWaiterSleepsUntilExpiry(t *testing.T) {
	c := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	store := lock.NewMemory(c)
	l, err := lock.New(store, lock.Namespace("fake"), lock.WithClock(c))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, ok, err := l.Take(ctx, "k", lock.TTL(time.Minute))
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	type result struct {
		h   lock.Hold
		ok  bool
		err error
	}
	done := make(chan result, 1)
	go func() {
		h, ok, err := l.Take(ctx, "k", lock.Wait(time.Hour), lock.RetryDelay(time.Hour))
		done <- result{h, ok, err}
	}()
	if err := c.WaitTimers(ctx, 1); err != nil {
		t.Fatal(err)
	}
	at, _ := c.Next()
	if want := c.Now().Add(time.Minute); at.Before(want) || at.After(want.Add(10*time.Millisecond)) {
		t.Fatalf("waiter's timer set for %v, want the holder's expiry %v", at, want)
	}
	c.Set(at)
	r := <-done
	if r.err != nil || !r.ok || r.h.Fence <= h.Fence {
		t.Fatalf("after the holder's expiry: %+v", r)
	}
	if err := l.Release(ctx, h.Token); err == nil {
		t.Fatal("the expired holder released a place it no longer holds")
	}
}
