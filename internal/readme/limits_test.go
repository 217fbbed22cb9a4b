package readme_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// docs/flow-control.md, "Limits per key".
type RenderJob struct {
	ID          int64      `db:"id" inbox:"id,generated"`
	LockedUntil *time.Time `db:"locked_until" inbox:"locked_until"`
	Payload     []byte     `db:"payload" inbox:"payload"`
	Attempts    int        `db:"attempts" inbox:"attempts"`
	CustomerID  string     `db:"customer_id"`
}

// docs/flow-control.md, "Limits per key".
const renderJobsSQLite = `CREATE TABLE render_jobs (
    id           INTEGER PRIMARY KEY,
    locked_until INTEGER,
    payload      BLOB NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 0,
    customer_id  TEXT NOT NULL
)`

// docs/flow-control.md, "Limits per key".
func subscribeRenders(b *inbox.Broker, render func(ctx context.Context, job RenderJob, fence int64) error) (*inbox.Subscription, error) {
	renders := inbox.MustQueue[RenderJob]("render_jobs")
	return inbox.Subscribe(b, renders, func(ctx context.Context, job RenderJob) error {
		slot, _ := inbox.SlotFrom(ctx) // which of the customer's 2 slots, and its fence
		return render(ctx, job, slot.Fence)
	}, inbox.Workers(8), inbox.Limit("customer_id", 2))
}

// renderTable makes render_jobs with 18 rows, 6 of each of 3 customers,
// and the slot table, on a database of its own; its URL.
func renderTable(t *testing.T) string {
	ctx := context.Background()
	url := inboxtest.SQLite(t)
	db := inboxtest.Open(t, url)
	if _, err := db.ExecContext(ctx, renderJobsSQLite); err != nil {
		t.Fatal(err)
	}
	if err := migrations.ApplyLimits(ctx, db); err != nil {
		t.Fatal(err)
	}
	for i := range 18 {
		if _, err := db.ExecContext(ctx, "INSERT INTO render_jobs (payload, customer_id) VALUES ('p', ?)", []string{"a", "b", "c"}[i%3]); err != nil {
			t.Fatal(err)
		}
	}
	return url
}

// renders counts the renders of each customer in work, and fails a test
// that sees more than 2 at once.
type renders struct {
	mu   sync.Mutex
	now  map[string]int
	done chan struct{}
}

func (r *renders) render(t *testing.T, customer string, fence int64) {
	r.mu.Lock()
	r.now[customer]++
	if r.now[customer] > 2 || fence <= 0 {
		t.Errorf("customer %s: %d renders at once, fence %d", customer, r.now[customer], fence)
	}
	r.mu.Unlock()
	time.Sleep(2 * time.Millisecond) // the render
	r.mu.Lock()
	r.now[customer]--
	r.mu.Unlock()
	r.done <- struct{}{}
}

func (r *renders) wait(t *testing.T) {
	for i := range 18 {
		select {
		case <-r.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of 18 renders within 30s", i)
		}
	}
}

// The flow-control guide's sample: 8 workers, 3 customers of 6 renders
// each, never more than 2 of a customer at once.
func TestRenderLimit(t *testing.T) {
	b := inboxtest.NewBroker(t, renderTable(t))
	r := &renders{now: map[string]int{}, done: make(chan struct{}, 18)}
	sub, err := subscribeRenders(b, func(ctx context.Context, job RenderJob, fence int64) error {
		r.render(t, job.CustomerID, fence)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	inboxtest.RunSubscription(t, sub)
	r.wait(t)
}

// docs/flow-control.md, "A limit and a rate together".
func subscribeCappedRenders(b *inbox.Broker, render func(ctx context.Context, job RenderJob) error) (*inbox.Subscription, error) {
	renders := inbox.MustQueue[RenderJob]("render_jobs")
	return inbox.Subscribe(b, renders, render, inbox.Workers(8),
		inbox.Limit("customer_id", 2), inbox.Rate("customer_id", 100, time.Minute))
}

// The limit and rate sample: never more than 2 renders of a customer at
// once, each holding a slot of its limit and one of its rate.
func TestCappedRenders(t *testing.T) {
	b := inboxtest.NewBroker(t, renderTable(t))
	r := &renders{now: map[string]int{}, done: make(chan struct{}, 18)}
	sub, err := subscribeCappedRenders(b, func(ctx context.Context, job RenderJob) error {
		held := inbox.SlotsFrom(ctx)
		if len(held) != 2 || held[0].Key != job.CustomerID || held[1].Key != job.CustomerID {
			t.Errorf("render %d of customer %s holds slots %+v, want its limit's and its rate's", job.ID, job.CustomerID, held)
			return nil
		}
		r.render(t, job.CustomerID, held[0].Fence)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	inboxtest.RunSubscription(t, sub)
	r.wait(t)
}

// ChargeJob is a row of charge_jobs, the rate sample's table.
type ChargeJob struct {
	ID          int64      `db:"id" inbox:"id,generated"`
	LockedUntil *time.Time `db:"locked_until" inbox:"locked_until"`
	Payload     []byte     `db:"payload" inbox:"payload"`
	Attempts    int        `db:"attempts" inbox:"attempts"`
	AccountID   string     `db:"account_id"`
}

// docs/flow-control.md, "Rates per key".
func subscribeCharges(b *inbox.Broker, charge func(ctx context.Context, job ChargeJob) error) (*inbox.Subscription, error) {
	charges := inbox.MustQueue[ChargeJob]("charge_jobs")
	return inbox.Subscribe(b, charges, charge, inbox.Workers(8), inbox.Rate("account_id", 100, time.Minute))
}

// The rate sample: 6 charges of 2 accounts, well within 100 a minute, all
// start, each holding a slot of its account.
func TestChargeRate(t *testing.T) {
	ctx := context.Background()
	url := inboxtest.SQLite(t)
	db := inboxtest.Open(t, url)
	if _, err := db.ExecContext(ctx, `CREATE TABLE charge_jobs (id INTEGER PRIMARY KEY, locked_until INTEGER, payload BLOB NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0, account_id TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	if err := migrations.ApplyLimits(ctx, db); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		if _, err := db.ExecContext(ctx, "INSERT INTO charge_jobs (payload, account_id) VALUES ('p', ?)", []string{"a", "b"}[i%2]); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan struct{}, 6)
	sub, err := subscribeCharges(inboxtest.NewBroker(t, url), func(ctx context.Context, job ChargeJob) error {
		if s, ok := inbox.SlotFrom(ctx); !ok || s.Key != job.AccountID {
			t.Errorf("charge %d of account %s holds slot %+v", job.ID, job.AccountID, s)
		}
		done <- struct{}{}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	inboxtest.RunSubscription(t, sub)
	for i := range 6 {
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of 6 charges within 30s", i)
		}
	}
}
