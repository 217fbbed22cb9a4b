package readme_test

import (
	"context"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// docs/history.md: a subscription that keeps its acked rows for a week.
func subscribeWithHistory(ctx context.Context, b *inbox.Broker, q inbox.Queue[RenderInvoice], handle inbox.Handler[RenderInvoice]) (*inbox.Subscription, error) {
	// invoice_jobs_history: invoice_jobs's columns, handled_at, handled_by, duration_us
	if err := migrations.ApplyHistory(ctx, b.DB(), "invoice_jobs", "id", ""); err != nil {
		return nil, err
	}
	return inbox.Subscribe(b, q, handle, inbox.History(7*24*time.Hour))
}

// docs/history.md: did row 1 run, when, how many times, where, how long?
const historyOfRow = `
SELECT id, attempts, last_error, handled_at, handled_by, duration_us
FROM invoice_jobs_history WHERE id = 1
`

func TestHistorySample(t *testing.T) {
	ctx := context.Background()
	url := inboxtest.SQLite(t)
	b := inboxtest.NewBroker(t, url)
	if err := migrations.Apply(ctx, b.DB(), "invoice_jobs"); err != nil {
		t.Fatal(err)
	}
	q := inbox.MustQueue[RenderInvoice]("invoice_jobs")
	done := make(chan struct{}, 1)
	sub, err := subscribeWithHistory(ctx, b, q, func(context.Context, RenderInvoice) error { done <- struct{}{}; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inbox.Publish(ctx, b, q, RenderInvoice{Payload: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	stop := inboxtest.RunSubscription(t, sub)
	<-done
	stop() // Run returns once the ack is settled
	var id int64
	var attempts int
	var lastError *string
	var at, by string
	var took int64
	if err := b.DB().QueryRowContext(ctx, historyOfRow).Scan(&id, &attempts, &lastError, &at, &by, &took); err != nil {
		t.Fatal(err)
	}
	if id != 1 || attempts != 1 || lastError != nil || at == "" || by == "" {
		t.Fatalf("history row: %d %d %v %q %q", id, attempts, lastError, at, by)
	}
}
