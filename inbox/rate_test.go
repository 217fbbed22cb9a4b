package inbox_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/claim/lease"
	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/internal/claim"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// starts records handler starts per key: the host time and the slot's
// fence, the time (µs) its slot was taken.
type starts struct {
	mu  sync.Mutex
	at  map[string][]time.Time
	tk  map[string][]time.Time
	lag time.Duration // the longest from a slot's take to its handler's start
}

func newStarts() *starts { return &starts{at: map[string][]time.Time{}, tk: map[string][]time.Time{}} }

func (s *starts) start(t *testing.T, ctx context.Context, key string) {
	now := time.Now()
	sl, ok := inbox.SlotFrom(ctx)
	if !ok || sl.Key != key {
		t.Errorf("handler of key %q holds slot %+v (%v)", key, sl, ok)
		return
	}
	s.record(key, now, time.UnixMicro(sl.Fence))
}

// record records a start of key at now, whose slot was taken at took.
func (s *starts) record(key string, now, took time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.at[key] = append(s.at[key], now)
	s.tk[key] = append(s.tk[key], took)
	s.lag = max(s.lag, now.Sub(took))
}

func (s *starts) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, a := range s.at {
		n += len(a)
	}
	return n
}

// tightest is the shortest span of n+1 consecutive times of ts: under a
// rate of n per window it is at least the window.
func tightest(ts []time.Time, n int) time.Duration {
	ts = slices.Clone(ts)
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	least := time.Duration(1<<63 - 1)
	for i := 0; i+n < len(ts); i++ {
		least = min(least, ts[i+n].Sub(ts[i]))
	}
	return least
}

// check asserts the rate of n per per on every key: the slots' takes
// exactly (one host's clock), the handler starts within the stated bound
// (the longest take to start); and that a backlog's next window opened
// within slack of the earliest the rate allows.
func (s *starts) check(t *testing.T, n int, per, slack time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, at := range s.at {
		took := tightest(s.tk[k], n)
		began := tightest(at, n)
		t.Logf("key %q: %d starts; tightest %d+1 takes %v, starts %v (window %v, longest take to start %v)", k, len(at), n, took, began, per, s.lag)
		if took < per-time.Millisecond {
			t.Errorf("key %q: %d slots taken within %v, rate %d per %v", k, n+1, took, n, per)
		}
		if began < per-s.lag {
			t.Errorf("key %q: %d starts within %v, rate %d per %v less the longest take to start %v", k, n+1, began, n, per, s.lag)
		}
		ts := slices.Clone(s.tk[k])
		slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
		for i := 0; i+n < len(ts); i++ {
			if gap := ts[i+n].Sub(ts[i]); gap > per+slack {
				t.Errorf("key %q: slot %d taken %v after slot %d: the window allowed it at %v (slack %v)", k, i+n, gap, i, per, slack)
			}
		}
	}
}

// Two instances drain a backlog of 3 keys under a rate of 3 per 400ms, the
// poll a minute off: never more than 3 slots of a key taken in any window
// (exactly), nor more than 3 starts in a window less the take-to-start
// bound; each window's rows claimed once it allows (the expiry's timer, not
// the poll); every row at its first attempt.
func TestRateCapsStartsPerWindow(t *testing.T) {
	eachLimitCase(t, func(t *testing.T, form claim.Form, url string) {
		const n, per, each = 3, 400 * time.Millisecond, 12
		b := open(t, url, inbox.PollInterval(time.Minute))
		table := keyedTable(t, b)
		b2 := open(t, url, inbox.PollInterval(time.Minute))
		var all []string
		for range each {
			all = append(all, "a", "b", "c")
		}
		insertKeyed(t, b.DB(), table, all...)
		s := newStarts()
		ev := inboxtest.NewEvents(t)
		handle := func(ctx context.Context, j KeyedJob) error {
			s.start(t, ctx, j.Customer)
			if j.Attempts != 1 {
				t.Errorf("row %d handled at attempt %d, want 1", j.ID, j.Attempts)
			}
			return nil
		}
		for _, br := range []*inbox.Broker{b, b2} {
			sub, err := inbox.Subscribe(br, inbox.MustQueue[KeyedJob](table), handle, inbox.Form(form), inbox.Workers(4),
				inbox.Rate("customer", n, per), ev.Observe())
			if err != nil {
				t.Fatal(err)
			}
			inboxtest.RunSubscription(t, sub)
		}
		ev.Wait("every row acked", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Acked) == 3*each })
		s.check(t, n, per, 5*time.Second)
		if got := s.count(); got != 3*each {
			t.Fatalf("%d starts, want %d", got, 3*each)
		}
	})
}

// A key at its rate holds back its own rows only: rows of other keys
// written later start at once.
func TestRateHoldsBackItsKeyOnly(t *testing.T) {
	eachLimitCase(t, func(t *testing.T, form claim.Form, url string) {
		b := open(t, url, inbox.PollInterval(200*time.Millisecond))
		table := keyedTable(t, b)
		insertKeyed(t, b.DB(), table, "a", "a", "a", "a")
		started := make(chan string, 10)
		sub, err := inbox.Subscribe(b, inbox.MustQueue[KeyedJob](table), func(ctx context.Context, j KeyedJob) error {
			started <- j.Customer
			return nil
		}, inbox.Form(form), inbox.Workers(4), inbox.Rate("customer", 1, time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
		if k := <-started; k != "a" {
			t.Fatalf("key %q started", k)
		}
		at := time.Now()
		insertKeyed(t, b.DB(), table, "b", "c", "d")
		got := map[string]bool{}
		for len(got) < 3 {
			select {
			case k := <-started:
				if k == "a" {
					t.Fatal("a second row of key a started within its window of an hour")
				}
				got[k] = true
			case <-time.After(20 * time.Second):
				t.Fatalf("rows of keys b, c, d: %v started within 20s, while key a waits on its rate", got)
			}
		}
		t.Logf("rows of other keys started %v after their insert", time.Since(at))
		inboxtest.Idle(t, sub)
		if n := rowsOf(t, b.DB(), table+" WHERE attempts = 0"); n != 3 {
			t.Fatalf("%d rows of key a waiting at attempt 0, want 3", n)
		}
	})
}

// On the injected clock: the next rows of a key start when the window's
// first start is per old, woken by the expiry, not before, and not a poll
// later (the poll is an hour).
func TestRateWindowOnTheClock(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		c := fake()
		b := open(t, url, inbox.WithClock(c), inbox.PollInterval(time.Hour))
		table := keyedTable(t, b)
		insertKeyed(t, b.DB(), table, "a", "a", "a", "a", "a", "a")
		started := make(chan time.Time, 6)
		sub, err := inbox.Subscribe(b, inbox.MustQueue[KeyedJob](table), func(ctx context.Context, j KeyedJob) error {
			started <- c.Now()
			return nil
		}, inbox.Form(lease.Form), inbox.Workers(4), inbox.Rate("customer", 2, time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
		receiveN(t, started, 2, "the first window's starts")
		for _, step := range []time.Duration{30 * time.Second, 29 * time.Second} {
			inboxtest.Idle(t, sub)
			c.Advance(step)
			inboxtest.Idle(t, sub)
			select {
			case at := <-started:
				t.Fatalf("a row started at %v, inside the first window of a minute", at.Sub(epoch))
			default:
			}
		}
		c.Advance(time.Second) // the first window ends
		for range 2 {
			select {
			case at := <-started:
				if d := at.Sub(epoch); d < time.Minute {
					t.Fatalf("a row started at %v, inside the first window", d)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the second window's rows did not start within 20s of its opening (poll: an hour)")
			}
		}
	})
}

// Bad rates are refused at Subscribe, naming the option; a rate with
// FairBy too, saying why.
func TestRateRefusals(t *testing.T) {
	b := open(t, inboxtest.SQLite(t))
	q := inbox.MustQueue[Job]("jobs")
	h := func(context.Context, Job) error { return nil }
	for _, o := range [][]inbox.SubOption{{inbox.Rate("customer", 0, time.Second)}, {inbox.Rate("", 1, time.Second)},
		{inbox.Rate("customer", 1, 0)}, {inbox.SharedRate("bad name", "customer", 1, time.Second)},
		{inbox.Rate("customer", 1, time.Second), inbox.FairBy("customer")}, {inbox.FairBy("customer"), inbox.Rate("customer", 1, time.Second)}} {
		_, err := inbox.Subscribe(b, q, h, o...)
		if !errors.Is(err, inbox.ErrInvalid) {
			t.Errorf("Subscribe: %v, want ErrInvalid", err)
		} else if !strings.Contains(err.Error(), "Rate") {
			t.Errorf("Subscribe: %v, want the error to name Rate", err)
		}
	}
	sub, err := inbox.Subscribe(b, q, h, inbox.Rate("customer", 5, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if c, n, per := sub.Rate(); c != "customer" || n != 5 || per != time.Minute {
		t.Fatalf("Rate() = %q, %d, %v", c, n, per)
	}
	if c, n := sub.Limit(); c != "" || n != 0 {
		t.Fatalf("Limit() = %q, %d on a subscription with a rate", c, n)
	}
	_, err = inbox.Subscribe(b, q, h, inbox.FairBy("customer"), inbox.Rate("customer", 1, time.Second))
	if err == nil || !strings.Contains(err.Error(), "probe") {
		t.Errorf("Subscribe with FairBy and Rate: %v, want an error saying why", err)
	}
}

// Operator.Limits shows a rate as a limit, its n and window from the
// registry: a key value at its rate holds its n slots, the starts of the
// window, and its other rows wait.
func TestOperatorRates(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		b, table, svc := fiveOfKeyA(t, url)
		ctx := context.Background()
		started := make(chan string, 5)
		sub, err := inbox.Handle(svc, inbox.MustQueue[KeyedJob](table), func(ctx context.Context, j KeyedJob) error {
			started <- j.Customer
			return nil
		}, inbox.Workers(4), inbox.Rate("customer", 2, time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.StartLive(t, svc)
		receiveN(t, started, 2, "the window's two starts")
		inboxtest.Idle(t, sub)
		ls, err := inbox.NewOperator(b).Limits(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := []inbox.LimitUse{{Name: table + ":customer:rate", Column: "customer", N: 2, Per: time.Hour, Tables: []string{table},
			Keys: []inbox.KeyUse{{Key: "a", Held: 2, Waiting: 3}}}}
		if !reflect.DeepEqual(ls, want) {
			t.Fatalf("Limits = %+v, want %+v", ls, want)
		}
	})
}

// fiveOfKeyA opens a broker on url with a keyed table of its own holding 5
// rows of key a, the registry, and a service registered on it that does not
// run yet.
func fiveOfKeyA(t *testing.T, url string) (*inbox.Broker, string, *inbox.Service) {
	b := open(t, url, inbox.PollInterval(200*time.Millisecond))
	table := keyedTable(t, b)
	if err := migrations.ApplyRegistry(context.Background(), b.DB()); err != nil {
		t.Fatal(err)
	}
	insertKeyed(t, b.DB(), table, "a", "a", "a", "a", "a")
	svc := inbox.NewService("tenants", "1", b)
	svc.Signals = false
	if err := svc.Register(inbox.RegistryHeartbeat(time.Second)); err != nil {
		t.Fatal(err)
	}
	return b, table, svc
}
