package readme_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
)

// docs/flow-control.md, "Fair shares".
func subscribeFair(b *inbox.Broker, handle inbox.Handler[EmailJob]) (*inbox.Subscription, error) {
	// One subscription over every tenant, taking them in turn.
	sub, err := inbox.Subscribe(b, emails, handle, inbox.FairBy("tenant"), inbox.Workers(8))
	return sub, err
}

// The fair subscription of the guide on the README's table: a tenant's
// row published behind another's backlog is handled long before the
// backlog is.
func TestFairSharesSample(t *testing.T) {
	ctx := context.Background()
	url := inboxtest.SQLite(t)
	emailTable(t, url)
	b := inboxtest.NewBroker(t, url)
	big := make([]EmailJob, 2000)
	for i := range big {
		big[i] = EmailJob{Tenant: "bigco", Payload: []byte(`{}`)}
	}
	if _, err := inbox.PublishMany(ctx, b, emails, big); err != nil {
		t.Fatal(err)
	}
	small, err := inbox.Publish(ctx, b, emails.Group("acme"), EmailJob{Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	before := -1 // bigco's rows handled before acme's
	bigco := 0
	done := make(chan struct{})
	sub, err := subscribeFair(b, func(ctx context.Context, j EmailJob) error {
		mu.Lock()
		defer mu.Unlock()
		if j.ID == small {
			before = bigco
			close(done)
		} else {
			bigco++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	inboxtest.RunSubscription(t, sub)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("acme's row was not handled within 30s")
	}
	mu.Lock()
	defer mu.Unlock()
	// One claim takes at most one row a worker, and spares on Postgres.
	if before > 100 {
		t.Errorf("acme's row was handled after %d of bigco's, want about one claim's worth", before)
	}
	t.Logf("acme's row handled after %d of bigco's 2000", before)
}
