package inboxotel_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxotel"
	"github.com/sqlinbox/sqlinbox/lock"
)

// Every option refuses a value out of its bound with an error wrapping the
// module's ErrInvalid, naming the option, the value and the bound; nothing
// is made.
func TestOptionsRefused(t *testing.T) {
	l, err := lock.New(lock.NewMemory(clock.Host{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		opt  inboxotel.Option
		want []string
	}{
		{inboxotel.WithMeterProvider(nil), []string{"WithMeterProvider(nil)"}},
		{inboxotel.WithTracerProvider(nil), []string{"WithTracerProvider(nil)"}},
		{inboxotel.CountLimit(0), []string{"CountLimit(0)", "at least 1"}},
	} {
		ml, err := inboxotel.NewLocker(l, tc.opt)
		if ml != nil || !errors.Is(err, inboxotel.ErrInvalid) || !errors.Is(err, inbox.ErrInvalid) {
			t.Errorf("%s: %v, %v; want no locker and an error wrapping ErrInvalid", tc.want[0], ml, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", tc.want[0], err, w)
			}
		}
		if h, err := inboxotel.ScheduleHandler(nil, tc.opt); h != nil || !errors.Is(err, inbox.ErrInvalid) {
			t.Errorf("ScheduleHandler %s: %v; want ErrInvalid", tc.want[0], err)
		}
	}
}
