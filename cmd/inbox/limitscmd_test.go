package main

import (
	"context"
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// tenantJob is the reference table's row with a customer column to limit.
type tenantJob struct {
	ID          int64      `db:"id" inbox:"id,generated"`
	LockedUntil *time.Time `db:"locked_until" inbox:"locked_until"`
	Payload     []byte     `db:"payload" inbox:"payload"`
	Customer    string     `db:"customer"`
}

// limits and queues show the limit a registered service's subscription
// records (column customer, n 2) and the slots it holds while its handlers
// block: 2 of customer acme (its limit, its 3 other rows waiting) and 1 of
// globex (none waiting); queues --json gives the table's queue the same.
func TestLimitsCommand(t *testing.T) {
	everyDB(t, func(t *testing.T, url string) {
		ctx := context.Background()
		if out := inboxCmd(t, "limits", "--db", url); !strings.Contains(out, "no limit recorded or held") {
			t.Fatalf("limits without the slot table:\n%s", out)
		}
		b, err := inbox.Open(url, inbox.PollInterval(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		db := b.DB()
		if err := migrations.Apply(ctx, db, "tenant_jobs"); err != nil {
			t.Fatal(err)
		}
		for _, ddl := range []string{"ALTER TABLE tenant_jobs ADD COLUMN customer VARCHAR(64)",
			"INSERT INTO tenant_jobs (payload, customer) VALUES ('p', 'acme'), ('p', 'acme'), ('p', 'acme'), ('p', 'acme'), ('p', 'acme'), ('p', 'globex')"} {
			if _, err := db.Exec(ddl); err != nil {
				t.Fatal(err)
			}
		}
		if err := migrations.ApplyLimits(ctx, db); err != nil {
			t.Fatal(err)
		}
		if err := migrations.ApplyRegistry(ctx, db); err != nil {
			t.Fatal(err)
		}
		svc := inbox.NewService("tenants", "1.0.0", b)
		svc.Signals = false
		if err := svc.Register(inbox.RegistryHeartbeat(50 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		started, release := make(chan string, 8), make(chan struct{})
		if _, err := inbox.Handle(svc, inbox.MustQueue[tenantJob]("tenant_jobs"), func(_ context.Context, j tenantJob) error {
			started <- j.Customer
			<-release
			return nil
		}, inbox.Workers(4), inbox.Limit("customer", 2)); err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- svc.Run(rctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		})
		t.Cleanup(func() { close(release) }) // runs first: the handlers return
		for range 3 {
			select {
			case <-started:
			case <-time.After(30 * time.Second):
				t.Fatal("waited 30s for 3 rows in work")
			}
		}

		var got []limitJSON
		if err := json.Unmarshal([]byte(inboxCmd(t, "limits", "--db", url, "--json")), &got); err != nil {
			t.Fatal(err)
		}
		col, n := "customer", 2
		want := []limitJSON{{Name: "tenant_jobs:customer", Column: &col, N: &n, Tables: []string{"tenant_jobs"},
			Keys: []limitKeyJS{{Key: "acme", Held: 2, Waiting: 3}, {Key: "globex", Held: 1}}}}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("limits --json = %+v, want %+v", got, want)
		}
		doc, err := os.ReadFile("../../docs/operating.md")
		if err != nil {
			t.Fatal(err)
		}
		var v any
		_ = json.Unmarshal([]byte(inboxCmd(t, "limits", "--db", url, "--json")), &v)
		checkSchema(t, "limits", "", v, string(doc))

		row := regexp.MustCompile(`(?m)^tenant_jobs:customer\s+customer\s+2\s+acme\s+2\s+3\s+0$`)
		if out := inboxCmd(t, "limits", "--db", url); !row.MatchString(out) {
			t.Fatalf("limits does not show acme's 2 slots:\n%s", out)
		}
		if out := inboxCmd(t, "queues", "--db", url); !row.MatchString(out) || !strings.Contains(out, "WAITING") {
			t.Fatalf("queues does not show the limits:\n%s", out)
		}
		qout := inboxCmd(t, "queues", "--db", url, "--json")
		var qs []queueJSON
		if err := json.Unmarshal([]byte(qout), &qs); err != nil {
			t.Fatal(err)
		}
		_ = json.Unmarshal([]byte(qout), &v)
		checkSchema(t, "queues", "", v, string(doc))
		if len(qs) != 1 || !reflect.DeepEqual(qs[0].Limits, want) {
			t.Fatalf("queues --json = %+v, want one queue with the limits %+v", qs, want)
		}
	})
}
