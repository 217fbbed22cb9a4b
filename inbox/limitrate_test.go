package inbox_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/internal/claim"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// AccountJob is KeyedJob with an account column beside the customer.
type AccountJob struct {
	ID          int64      `db:"id" inbox:"id,generated"`
	LockedUntil *time.Time `db:"locked_until" inbox:"locked_until"`
	Payload     []byte     `db:"payload" inbox:"payload"`
	Attempts    int        `db:"attempts" inbox:"attempts"`
	Customer    string     `db:"customer"`
	Account     string     `db:"account"`
}

// accountOf is the account of customers a, b (p) and c (q).
func accountOf(customer string) string {
	if customer == "c" {
		return "q"
	}
	return "p"
}

// Two instances drain 45 rows over 3 customers under Limit 2 and Rate 5 a
// second, the rate on the customer column too: never more than 2 rows of a
// customer in work (from the handlers' start and end), never more than 5
// slots of the rate taken in any second (from the rate's slot fences, the
// takes' times), every row handled once at its first attempt (rows held
// back used none), the limit's slots all freed.
func TestLimitAndRateOnOneColumn(t *testing.T) {
	eachLimitCase(t, func(t *testing.T, form claim.Form, url string) { limitAndRate(t, form, url, "customer") })
}

// The same with the rate on another column: customers a and b share
// account p, c has q, and the rate caps the starts per account.
func TestLimitAndRateOnTwoColumns(t *testing.T) {
	eachLimitCase(t, func(t *testing.T, form claim.Form, url string) { limitAndRate(t, form, url, "account") })
}

func limitAndRate(t *testing.T, form claim.Form, url, rateColumn string) {
	const limit, n, per, each = 2, 5, time.Second, 15
	b := open(t, url, inbox.PollInterval(time.Minute))
	table := keyedTable(t, b)
	if _, err := b.DB().Exec("ALTER TABLE " + table + " ADD COLUMN account VARCHAR(64)"); err != nil {
		t.Fatal(err)
	}
	b2 := open(t, url, inbox.PollInterval(time.Minute))
	for range each {
		for _, c := range []string{"a", "b", "c"} {
			if _, err := b.DB().Exec("INSERT INTO "+table+" (payload, customer, account) VALUES ('p', "+param(b.DB(), 1)+", "+param(b.DB(), 2)+")", c, accountOf(c)); err != nil {
				t.Fatal(err)
			}
		}
	}
	w := newInWork(t, limit)
	s := newStarts()
	var mu sync.Mutex
	handled := map[int64]int{}
	ev := inboxtest.NewEvents(t)
	handle := func(ctx context.Context, j AccountJob) error {
		w.start(ctx, j.Customer)
		defer w.end(j.Customer)
		rateKey := j.Customer
		if rateColumn == "account" {
			rateKey = j.Account
		}
		held := inbox.SlotsFrom(ctx)
		if len(held) != 2 || !strings.HasSuffix(held[1].Limit, ":rate") || held[1].Key != rateKey {
			t.Errorf("row %d (customer %q, account %q) holds slots %+v, want its limit's then its rate's of key %q", j.ID, j.Customer, j.Account, held, rateKey)
		} else {
			s.record(rateKey, time.Now(), time.UnixMicro(held[1].Fence))
		}
		if j.Attempts != 1 {
			t.Errorf("row %d handled at attempt %d, want 1", j.ID, j.Attempts)
		}
		mu.Lock()
		handled[j.ID]++
		mu.Unlock()
		time.Sleep(100 * time.Millisecond) // the handler's work: the limit binds within a window
		return nil
	}
	for _, br := range []*inbox.Broker{b, b2} {
		sub, err := inbox.Subscribe(br, inbox.MustQueue[AccountJob](table), handle, inbox.Form(form), inbox.Workers(4),
			inbox.Limit("customer", limit), inbox.Rate(rateColumn, n, per), ev.Observe())
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
	}
	evs := ev.Wait("every row acked", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Acked) == 3*each })
	if got := len(evs); got != 3*each {
		t.Fatalf("%d events, want %d acks and nothing else: %v", got, 3*each, evs)
	}
	mu.Lock()
	for id, c := range handled {
		if c != 1 {
			t.Errorf("row %d handled %d times", id, c)
		}
	}
	if len(handled) != 3*each {
		t.Errorf("%d rows handled, want %d", len(handled), 3*each)
	}
	mu.Unlock()
	w.mu.Lock()
	t.Logf("peak in work per customer: %v (limit %d)", w.peak, limit)
	w.mu.Unlock()
	s.check(t, n, per, 10*time.Second)
	if got := rowsOf(t, b.DB(), table); got != 0 {
		t.Fatalf("%d rows left", got)
	}
	eventually(t, "the limit's slots freed", func() bool {
		return rowsOf(t, b.DB(), "sqlinbox_limit_slots WHERE holder <> '' AND limit_name = '"+table+":customer'") == 0
	})
}

// FairBy with a Limit or a Rate, and a SharedLimit and a SharedRate of one
// name, are refused at Subscribe, saying why; a Limit and a Rate together
// are not.
func TestLimitAndRateRefusals(t *testing.T) {
	b := open(t, inboxtest.SQLite(t))
	q := inbox.MustQueue[Job]("jobs")
	h := func(context.Context, Job) error { return nil }
	for _, o := range [][]inbox.SubOption{{inbox.Limit("customer", 1), inbox.FairBy("customer")},
		{inbox.SharedLimit("shared", "customer", 1), inbox.SharedRate("shared", "customer", 1, time.Second)}} {
		if _, err := inbox.Subscribe(b, q, h, o...); !errors.Is(err, inbox.ErrInvalid) {
			t.Errorf("Subscribe: %v, want ErrInvalid", err)
		} else {
			t.Log(err)
		}
	}
	sub, err := inbox.Subscribe(b, q, h, inbox.Rate("account", 5, time.Minute), inbox.Limit("customer", 2))
	if err != nil {
		t.Fatal(err)
	}
	if c, n := sub.Limit(); c != "customer" || n != 2 {
		t.Errorf("Limit() = %q, %d", c, n)
	}
	if c, n, per := sub.Rate(); c != "account" || n != 5 || per != time.Minute {
		t.Errorf("Rate() = %q, %d, %v", c, n, per)
	}
}

// Operator.Limits shows a subscription's Limit and Rate as two limits, each
// with its n and its slots: with a limit of 1 and a rate of 2 an hour,
// after one row acked and one in work, key a holds 1 slot of the limit and
// 2 of the rate, and its 3 other rows wait on both.
func TestOperatorLimitAndRate(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		b, table, svc := fiveOfKeyA(t, url)
		ctx := context.Background()
		started := make(chan int64, 5)
		release := make(chan struct{}, 5)
		sub, err := inbox.Handle(svc, inbox.MustQueue[KeyedJob](table), func(ctx context.Context, j KeyedJob) error {
			started <- j.ID
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		}, inbox.Workers(4), inbox.Limit("customer", 1), inbox.Rate("customer", 2, time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.StartLive(t, svc)
		receiveN(t, started, 1, "the first row")
		release <- struct{}{}
		receiveN(t, started, 1, "the second row, once the first freed its limit's slot")
		want := []inbox.LimitUse{
			{Name: table + ":customer", Column: "customer", N: 1, Tables: []string{table}, Keys: []inbox.KeyUse{{Key: "a", Held: 1, Waiting: 3}}},
			{Name: table + ":customer:rate", Column: "customer", N: 2, Per: time.Hour, Tables: []string{table}, Keys: []inbox.KeyUse{{Key: "a", Held: 2, Waiting: 3}}}}
		var ls []inbox.LimitUse
		eventually(t, "the limit and the rate in Operator.Limits", func() bool {
			ls, err = inbox.NewOperator(b).Limits(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return reflect.DeepEqual(ls, want)
		})
		if n, err := inbox.NewOperator(b).LimitWaiting(ctx, sub); err != nil || n != 6 {
			t.Fatalf("LimitWaiting = %d, %v; want 6 (3 rows waiting on each)", n, err)
		}
		close(release)
	})
}

// A rate's claim takes no more rows of a key value than its window has
// slots left, on SQLite and Postgres (the lease form's claim statement),
// so none is given back: 10 rows of key a, then 2 of b, a rate of 3 an
// hour and 8 workers: 3 rows of a start and both of b (behind a's rows, by
// the wake that follows a take of a's last slot, the poll an hour off),
// and no row was taken and given back. On MariaDB the claim still takes
// a's rows for every free worker and gives back those over its slots.
func TestRateClaimsNoMoreThanItsSlotsLeft(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		b := open(t, url, inbox.PollInterval(time.Hour))
		table := keyedTable(t, b)
		insertKeyed(t, b.DB(), table, "a", "a", "a", "a", "a", "a", "a", "a", "a", "a", "b", "b")
		started := make(chan string, 12)
		sub, err := inbox.Subscribe(b, inbox.MustQueue[KeyedJob](table), func(ctx context.Context, j KeyedJob) error {
			started <- j.Customer
			return nil
		}, inbox.Workers(8), inbox.Rate("customer", 3, time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
		got := map[string]int{}
		for range 5 {
			select {
			case k := <-started:
				got[k]++
			case <-time.After(30 * time.Second):
				t.Fatalf("starts %v within 30s, want 3 of a and 2 of b", got)
			}
		}
		inboxtest.Idle(t, sub)
		if len(started) > 0 || got["a"] != 3 || got["b"] != 2 {
			t.Fatalf("starts %v and %d more, want 3 of a and 2 of b", got, len(started))
		}
		refused := sub.Stats().LimitRefused
		t.Logf("rows given back over their slots: %d", refused)
		if !strings.HasPrefix(url, "mysql") && refused != 0 {
			t.Fatalf("%d rows claimed and given back over their key's slots, want none: the claim takes no more than the slots left", refused)
		}
	})
}

// UrgentKeyed is Urgent with a customer.
type UrgentKeyed struct {
	ID          int64      `db:"id" inbox:"id,generated"`
	LockedUntil *time.Time `db:"locked_until" inbox:"locked_until"`
	Payload     []byte     `db:"payload" inbox:"payload"`
	Priority    int16      `db:"priority" inbox:"priority"`
	Customer    string     `db:"customer"`
}

// On a table with priorities, the rows a rate's claim keeps of a key value
// are its first in claim order (priority, then id): with a rate of 2 an
// hour, the two rows of priority 0 start, published after rows of
// priorities 5 and 3, and none is given back (SQLite, Postgres).
func TestRateKeepsAKeysFirstRowsByPriority(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		b := openPriority(t, url, true, inbox.PollInterval(time.Hour))
		if _, err := b.DB().Exec("ALTER TABLE jobs ADD COLUMN customer VARCHAR(64)"); err != nil {
			t.Fatal(err)
		}
		if err := migrations.ApplyLimits(context.Background(), b.DB()); err != nil {
			t.Fatal(err)
		}
		q := inbox.MustQueue[UrgentKeyed]("jobs")
		var rows []UrgentKeyed
		for _, p := range []int16{5, 3, 0, 9, 0, 3} {
			rows = append(rows, UrgentKeyed{Payload: []byte("p"), Priority: p, Customer: "a"})
		}
		if _, err := inbox.PublishMany(context.Background(), b, q, rows); err != nil {
			t.Fatal(err)
		}
		started := make(chan int16, 6)
		sub, err := inbox.Subscribe(b, q, func(_ context.Context, u UrgentKeyed) error {
			started <- u.Priority
			return nil
		}, inbox.Workers(8), inbox.Rate("customer", 2, time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
		for range 2 {
			select {
			case p := <-started:
				if p != 0 {
					t.Errorf("a row of priority %d started, want the two of priority 0", p)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the window's two rows did not start within 30s")
			}
		}
		inboxtest.Idle(t, sub)
		if len(started) > 0 {
			t.Errorf("%d rows more started, want 2 in the window", len(started))
		}
		if refused := sub.Stats().LimitRefused; !strings.HasPrefix(url, "mysql") && refused != 0 {
			t.Errorf("%d rows given back over their key's slots, want none", refused)
		}
	})
}
