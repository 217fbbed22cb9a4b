package clock_test

import (
	"context"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/clock"
)

func TestFakeFiresTimersItPasses(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := clock.NewFake(start)
	early, late := c.NewTimer(time.Second), c.NewTimer(time.Minute)
	if got := c.Pending(); got != 2 {
		t.Fatalf("pending = %d, want 2", got)
	}
	c.Advance(2 * time.Second)
	select {
	case at := <-early.C():
		if !at.Equal(start.Add(2 * time.Second)) {
			t.Fatalf("fired at %v", at)
		}
	default:
		t.Fatal("the one-second timer did not fire after two seconds")
	}
	select {
	case <-late.C():
		t.Fatal("the one-minute timer fired after two seconds")
	default:
	}
	if !late.Stop() {
		t.Fatal("Stop of a pending timer reported it was not pending")
	}
	if c.Pending() != 0 {
		t.Fatal("a stopped timer is still pending")
	}
}

func TestFakeSleepWaitsForAdvance(t *testing.T) {
	c := clock.NewFake(time.Unix(0, 0))
	done := make(chan error)
	go func() { done <- clock.Sleep(context.Background(), c, time.Hour) }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.WaitTimers(ctx, 1); err != nil {
		t.Fatal(err)
	}
	c.Advance(time.Hour)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestInDatabase(t *testing.T) {
	if clock.InDatabase(clock.Host{}) || clock.InDatabase(clock.NewFake(time.Now())) {
		t.Fatal("host or fake clock reported as the database clock")
	}
	if !clock.InDatabase(clock.Database{}) {
		t.Fatal("Database clock not recognised")
	}
}

func TestOnHost(t *testing.T) {
	fake := clock.NewFake(time.Now())
	for _, c := range []struct {
		c    clock.Clock
		want bool
	}{
		{nil, true}, {clock.Host{}, true}, {clock.Database{}, true}, {&clock.Database{Clock: clock.Host{}}, true},
		{fake, false}, {clock.Database{Clock: fake}, false}, {&clock.Database{Clock: fake}, false},
	} {
		if got := clock.OnHost(c.c); got != c.want {
			t.Errorf("OnHost(%#v) = %v, want %v", c.c, got, c.want)
		}
	}
}

// TestAfterFunc: on a fake clock the function runs once the clock passes its
// time and not before, and a stopped one never runs; on the host clock (and
// the database clock over it) it runs once its time has passed.
func TestAfterFunc(t *testing.T) {
	c := clock.NewFake(time.Unix(0, 0))
	fired := make(chan string, 2)
	clock.AfterFunc(c, time.Minute, func() { fired <- "minute" })
	stopped := clock.AfterFunc(c, time.Second, func() { fired <- "stopped" })
	if !stopped.Stop() {
		t.Fatal("Stop of a pending fake timer reported it was not pending")
	}
	c.Advance(59 * time.Second)
	select {
	case f := <-fired:
		t.Fatalf("%q ran before its time", f)
	default:
	}
	c.Advance(time.Second)
	if f := <-fired; f != "minute" {
		t.Fatalf("ran %q, want minute", f)
	}
	for _, hc := range []clock.Clock{clock.Host{}, clock.Database{}, &clock.Database{}} {
		start := time.Now()
		done := make(chan time.Time, 1)
		tm := clock.AfterFunc(hc, 5*time.Millisecond, func() { done <- time.Now() })
		if tm.C() != nil {
			t.Errorf("%T: an AfterFunc timer has a channel", hc)
		}
		if at := <-done; at.Sub(start) < 5*time.Millisecond {
			t.Errorf("%T: ran after %v, want at least 5ms", hc, at.Sub(start))
		}
		if tm.Stop() {
			t.Errorf("%T: Stop after the run reported the timer pending", hc)
		}
	}
	select {
	case f := <-fired:
		t.Fatalf("%q ran after it was stopped", f)
	default:
	}
}

// TestFakeWaitNext returns once the earliest pending timer is due at the
// time asked, and fails with what is pending when its context ends first.
func TestFakeWaitNext(t *testing.T) {
	start := time.Unix(0, 0)
	c := clock.NewFake(start)
	armed := make(chan struct{})
	go func() {
		c.NewTimer(time.Minute)
		c.NewTimer(time.Second)
		close(armed)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.WaitNext(ctx, start.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	<-armed
	short, cancelShort := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancelShort()
	if err := c.WaitNext(short, start.Add(time.Minute)); err == nil {
		t.Fatal("WaitNext for the later timer returned while an earlier one is pending")
	}
}
