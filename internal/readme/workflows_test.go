package readme_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// docs/workflows.md, "Publish a child": render, then email and archive,
// then close.
func publishOrder(ctx context.Context, b *inbox.Broker, q inbox.Queue[RenderInvoice]) error {
	render, err := inbox.Publish(ctx, b, q, RenderInvoice{Payload: []byte("render 1001")})
	if err != nil {
		return err
	}
	email, err := inbox.Publish(ctx, b, q, RenderInvoice{Payload: []byte("email 1001")}, inbox.After(render))
	if err != nil {
		return err
	}
	archive, err := inbox.Publish(ctx, b, q, RenderInvoice{Payload: []byte("archive 1001")}, inbox.After(render))
	if err != nil {
		return err
	}
	_, err = inbox.Publish(ctx, b, q, RenderInvoice{Payload: []byte("close 1001")}, inbox.After(email, archive), inbox.IfParentParked(inbox.RunChild))
	return err
}

// docs/workflows.md, "Publish a child": each step publishes the next in
// its own transaction, which commits with its ack.
func subscribeSteps(b *inbox.Broker, q inbox.Queue[RenderInvoice], seen chan<- string) (*inbox.Subscription, error) {
	return inbox.SubscribeTx(b, q, func(ctx context.Context, tx *sql.Tx, j RenderInvoice) error {
		if p, ok := inbox.ParentsFrom(ctx); ok {
			seen <- string(j.Payload) + ": " + strings.Repeat("acked ", p.Acked)
		}
		if string(j.Payload) != "close 1001" {
			return nil
		}
		_, err := inbox.PublishTx(ctx, b, tx, q, RenderInvoice{Payload: []byte("thank 1001")}, inbox.After(j.ID))
		return err
	})
}

// docs/workflows.md, "Plain-SQL producers", one block per database: in one
// transaction, child 1003 waits for 1001 and 1002.
const (
	plainChildPostgres = `
INSERT INTO invoice_jobs (id, payload, locked_until) VALUES (1003, 'close', '9000-01-01 00:00:00+00');
INSERT INTO invoice_jobs_deps (child_id, parent_id) SELECT 1003, id FROM invoice_jobs WHERE id IN (1001, 1002) FOR KEY SHARE;
UPDATE invoice_jobs SET locked_until = NULL WHERE id = 1003 AND NOT EXISTS (SELECT 1 FROM invoice_jobs_deps WHERE child_id = 1003);
`
	plainChildMySQL = `
INSERT INTO invoice_jobs (id, payload, locked_until) VALUES (1003, 'close', '9000-01-01 00:00:00');
INSERT INTO invoice_jobs_deps (child_id, parent_id) SELECT 1003, id FROM invoice_jobs WHERE id IN (1001, 1002) LOCK IN SHARE MODE;
UPDATE invoice_jobs SET locked_until = NULL WHERE id = 1003 AND NOT EXISTS (SELECT 1 FROM invoice_jobs_deps WHERE child_id = 1003);
`
	plainChildSQLite = `
INSERT INTO invoice_jobs (id, payload, locked_until) VALUES (1003, 'close', '9000-01-01 00:00:00.000');
INSERT INTO invoice_jobs_deps (child_id, parent_id) SELECT 1003, id FROM invoice_jobs WHERE id IN (1001, 1002);
UPDATE invoice_jobs SET locked_until = NULL WHERE id = 1003 AND NOT EXISTS (SELECT 1 FROM invoice_jobs_deps WHERE child_id = 1003);
`
)

func TestWorkflowsSamples(t *testing.T) {
	for _, c := range []struct {
		name  string
		url   func(testing.TB) string
		plain string
	}{{"sqlite", inboxtest.SQLite, plainChildSQLite}, {"postgres", inboxtest.Postgres, plainChildPostgres}, {"mysql", inboxtest.MySQL, plainChildMySQL}} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			b := inboxtest.NewBroker(t, c.url(t))
			if err := migrations.Apply(ctx, b.DB(), "invoice_jobs"); err != nil {
				t.Fatal(err)
			}
			if err := migrations.ApplyDependencies(ctx, b.DB(), "invoice_jobs", "id"); err != nil {
				t.Fatal(err)
			}
			q := inbox.MustQueue[RenderInvoice]("invoice_jobs")
			if err := publishOrder(ctx, b, q); err != nil {
				t.Fatal(err)
			}
			seen := make(chan string, 8)
			sub, err := subscribeSteps(b, q, seen)
			if err != nil {
				t.Fatal(err)
			}
			inboxtest.RunSubscription(t, sub)
			want := map[string]bool{"email 1001: acked ": true, "archive 1001: acked ": true, "close 1001: acked acked ": true, "thank 1001: acked ": true}
			for range want {
				if got := <-seen; !want[got] {
					t.Fatalf("step %q", got)
				}
			}
			// Plain SQL: 1001 queued, 1002 gone.
			if _, err := b.DB().ExecContext(ctx, "INSERT INTO invoice_jobs (id, payload, locked_until) VALUES (1001, 'render', '9000-01-01 00:00:00')"); err != nil && c.name == "mysql" {
				t.Fatal(err)
			}
			tx, err := b.DB().BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, stmt := range strings.Split(strings.TrimSpace(c.plain), ";\n") {
				if _, err := tx.ExecContext(ctx, strings.TrimSuffix(stmt, ";")); err != nil {
					t.Fatalf("%s: %v", stmt, err)
				}
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			var edges int
			if err := b.DB().QueryRowContext(ctx, "SELECT count(*) FROM invoice_jobs_deps WHERE child_id = 1003").Scan(&edges); err != nil || edges != 1 {
				t.Fatalf("child 1003 has %d edges (%v), want 1 (to 1001, still queued)", edges, err)
			}
		})
	}
}
