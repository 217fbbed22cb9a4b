package dashboard_test

import (
	"context"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/dashboard"
	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// TenantJob is the reference table's row with a customer column to limit.
type TenantJob struct {
	ID          int64      `db:"id" inbox:"id,generated"`
	LockedUntil *time.Time `db:"locked_until" inbox:"locked_until"`
	Payload     []byte     `db:"payload" inbox:"payload"`
	Customer    string     `db:"customer"`
}

// The queue page lists its table's limit as the registry records it
// (column customer, n 2) and the slots it holds while the handlers block:
// acme's 2 (its limit, its 3 other rows waiting) and globex's 1 (none
// waiting).
func TestQueuePageShowsLimits(t *testing.T) {
	for name, open := range map[string]func(testing.TB) string{"sqlite": inboxtest.SQLite, "postgres": inboxtest.Postgres, "mysql": inboxtest.MySQL} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b, err := inbox.Open(open(t), inbox.PollInterval(50*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			db := b.DB()
			for _, m := range []func() error{
				func() error { return migrations.Apply(ctx, db, "tenant_jobs") },
				func() error { return migrations.ApplyRegistry(ctx, db) },
				func() error { return migrations.ApplyLimits(ctx, db) },
			} {
				if err := m(); err != nil {
					t.Fatal(err)
				}
			}
			for _, q := range []string{"ALTER TABLE tenant_jobs ADD COLUMN customer VARCHAR(64)",
				"INSERT INTO tenant_jobs (payload, customer) VALUES ('p', 'acme'), ('p', 'acme'), ('p', 'acme'), ('p', 'acme'), ('p', 'acme'), ('p', 'globex')"} {
				if _, err := db.Exec(q); err != nil {
					t.Fatal(err)
				}
			}
			svc := inbox.NewService("tenants", "1", b)
			svc.Signals = false
			if err := svc.Register(inbox.RegistryHeartbeat(200 * time.Millisecond)); err != nil {
				t.Fatal(err)
			}
			started, release := make(chan string, 8), make(chan struct{})
			if _, err := inbox.Handle(svc, inbox.MustQueue[TenantJob]("tenant_jobs"), func(_ context.Context, j TenantJob) error {
				started <- j.Customer
				<-release
				return nil
			}, inbox.Workers(4), inbox.Limit("customer", 2)); err != nil {
				t.Fatal(err)
			}
			inboxtest.StartLive(t, svc)
			t.Cleanup(func() { close(release) }) // before the service stops
			for range 3 {
				select {
				case <-started:
				case <-time.After(30 * time.Second):
					t.Fatal("waited 30s for 3 rows in work")
				}
			}
			h, err := dashboard.New(b)
			if err != nil {
				t.Fatal(err)
			}
			code, body := get(t, client(t), newServer(t, h)+"queue?table=tenant_jobs")
			if code != http.StatusOK {
				t.Fatalf("queue page: %d\n%s", code, body)
			}
			for _, key := range []string{`acme</td><td class="num">2</td><td class="num">3</td><td class="num">0`, `globex</td><td class="num">1</td><td class="num">0</td><td class="num">0`} {
				if !regexp.MustCompile(`(?s)<table id="limits">.*<td>tenant_jobs:customer</td><td>customer</td><td class="num">2</td><td>` + key).MatchString(body) {
					t.Errorf("the queue page's limits do not show %q:\n%s", key, body)
				}
			}
		})
	}
}
