package inboxtest

import (
	"sync"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/inbox"
)

// Epoch is where every fake clock of this kit starts.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// NewClock returns a fake clock showing Epoch.
func NewClock() *clock.Fake { return clock.NewFake(Epoch) }

// fakes maps the brokers this kit knows to their fake clocks, so Start can
// drive the clock of the service it is given.
var fakes struct {
	sync.Mutex
	of map[*inbox.Broker]*clock.Fake
}

// NewBroker opens a broker on url on a fresh fake clock (NewClock), closed
// at cleanup; Start then drives that clock. opts are applied after the
// clock: pass no inbox.WithClock among them, or Start drives a clock the
// broker does not read.
//
//	b := inboxtest.NewBroker(t, inboxtest.SQLite(t))
func NewBroker(t testing.TB, url string, opts ...inbox.Option) *inbox.Broker {
	t.Helper()
	c := NewClock()
	b, err := inbox.Open(url, append([]inbox.Option{inbox.WithClock(c)}, opts...)...)
	if err != nil {
		t.Fatalf("inboxtest: %v", err)
	}
	UseClock(t, b, c)
	t.Cleanup(func() { b.Close() })
	return b
}

// UseClock tells the kit that broker b was made with inbox.WithClock(c), for
// brokers the user's own code opens: Start on a service of b drives c. It
// holds until the test's cleanup.
func UseClock(t testing.TB, b *inbox.Broker, c *clock.Fake) {
	fakes.Lock()
	defer fakes.Unlock()
	if fakes.of == nil {
		fakes.of = map[*inbox.Broker]*clock.Fake{}
	}
	fakes.of[b] = c
	t.Cleanup(func() {
		fakes.Lock()
		defer fakes.Unlock()
		delete(fakes.of, b)
	})
}

// ClockOf returns the fake clock of b given to NewBroker or UseClock, nil
// for any other broker.
func ClockOf(b *inbox.Broker) *clock.Fake {
	fakes.Lock()
	defer fakes.Unlock()
	return fakes.of[b]
}
