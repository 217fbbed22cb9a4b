package inbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/claim/advisory"
	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/lock"
	"github.com/sqlinbox/sqlinbox/schedule"
)

// refusedWith checks that err wraps ErrInvalid (the one value inbox, lock
// and schedule export) and says each of want.
func refusedWith(t *testing.T, what string, err error, want ...string) {
	t.Helper()
	if !errors.Is(err, inbox.ErrInvalid) || !errors.Is(err, lock.ErrInvalid) || !errors.Is(err, schedule.ErrInvalid) {
		t.Errorf("%s: %v, want an error wrapping ErrInvalid", what, err)
		return
	}
	t.Log(err)
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: %q does not say %q", what, err, w)
		}
	}
}

// Every option refuses a value out of its bound at construction, naming
// the option, the value and the bound, and nothing is made: no broker (nor
// its listener: goleak checks at the end), no subscription.
func TestOptionsRefused(t *testing.T) {
	url := inboxtest.SQLite(t)
	for _, tc := range []struct {
		opt  inbox.Option
		want []string
	}{
		{inbox.PollInterval(0), []string{"PollInterval(0s)", "positive"}},
		{inbox.PollInterval(-time.Second), []string{"PollInterval(-1s)", "positive"}},
		{inbox.WithClock(nil), []string{"WithClock(nil)"}},
		{inbox.WithLogger(nil), []string{"WithLogger(nil)"}},
		{inbox.WithHub(nil), []string{"WithHub(nil)"}},
		{inbox.MaxConns(1), []string{"MaxConns(1)", "at least 2"}},
		{inbox.WithTraceContext(nil), []string{"WithTraceContext(nil)"}},
		{inbox.ListenNotify(), []string{"ListenNotify needs Postgres"}}, // url is SQLite
	} {
		b, err := inbox.Open(url, tc.opt)
		refusedWith(t, "Open: "+tc.want[0], err, tc.want...)
		if b != nil {
			t.Errorf("Open: %s: a broker was made", tc.want[0])
			b.Close()
		}
	}
	db, err := inbox.OpenDB(url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if b, err := inbox.New(db, inbox.PollInterval(-1)); b != nil || !errors.Is(err, inbox.ErrInvalid) {
		t.Errorf("New with PollInterval(-1ns): %v, %v; want no broker and ErrInvalid", b, err)
	}
	if b, err := inbox.New("not a pool"); b != nil || !errors.Is(err, inbox.ErrInvalid) {
		t.Errorf("New on a string: %v, %v; want no broker and ErrInvalid", b, err)
	}

	b := open(t, url)
	q, err := inbox.NewQueue[Job]("jobs")
	if err != nil {
		t.Fatal(err)
	}
	nop := func(context.Context, Job) error { return nil }
	for _, tc := range []struct {
		opt  inbox.SubOption
		want []string
	}{
		{inbox.Timeout(0), []string{"Timeout(0s)", "positive"}},
		{inbox.Timeout(-time.Second), []string{"Timeout(-1s)", "positive"}},
		{inbox.Workers(0), []string{"Workers(0)", "at least 1"}},
		{inbox.Lease(999 * time.Millisecond), []string{"Lease(999ms)", "at least 1s"}},
		{inbox.MaxAttempts(0), []string{"MaxAttempts(0)", "at least 1"}},
		{inbox.Backoff(nil), []string{"Backoff(nil)"}},
		{inbox.Form(nil), []string{"Form(nil)"}},
		{inbox.Form(advisory.Form), []string{"advisory form cannot run on"}}, // b is SQLite
		{inbox.ShutdownTimeout(0), []string{"ShutdownTimeout(0s)", "positive"}},
	} {
		sub, err := inbox.Subscribe(b, q, nop, tc.opt)
		refusedWith(t, "Subscribe: "+tc.want[0], err, tc.want...)
		if sub != nil {
			t.Errorf("Subscribe: %s: a subscription was made", tc.want[0])
		}
	}
	if sub, err := inbox.Subscribe(b, inbox.Queue[Job]{}, nop); sub != nil || !errors.Is(err, inbox.ErrInvalid) {
		t.Errorf("Subscribe to a zero Queue: %v, %v; want ErrInvalid", sub, err)
	}
	if sub, err := inbox.Subscribe(b, q, nil); sub != nil || !errors.Is(err, inbox.ErrInvalid) {
		t.Errorf("Subscribe with a nil handler: %v, %v; want ErrInvalid", sub, err)
	}
	svc := inbox.NewService("refused", "test", b)
	for _, tc := range []struct {
		opt  inbox.RegistryOption
		want []string
	}{
		{inbox.RegistryHeartbeat(0), []string{"RegistryHeartbeat(0s)", "at least 10ms"}},
		{inbox.RegistryHeartbeat(time.Millisecond), []string{"RegistryHeartbeat(1ms)", "at least 10ms"}},
		{inbox.RegistryKeep(time.Second), []string{"RegistryKeep(1s)", "at least 1m"}},
		{inbox.RegistryCancelPoll(time.Millisecond), []string{"RegistryCancelPoll(1ms)", "at least 10ms"}},
	} {
		err := svc.Register(tc.opt)
		refusedWith(t, "Register: "+tc.want[0], err, tc.want...)
		if svc.InstanceID() != "" {
			t.Errorf("Register: %s: the service was registered", tc.want[0])
		}
	}
}
