package readme_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
)

// smtpTry answers as a mail server would for the address in the payload.
func smtpTry(ctx context.Context, job EmailJob) error {
	switch string(job.Payload) {
	case "busy":
		return errRateLimited
	case "nobody":
		return errNoMailbox
	case "grey":
		return errGreylisted
	}
	return nil
}

// emailTable makes the README's email_jobs table on url's database.
func emailTable(t *testing.T, url string) {
	t.Helper()
	ddl := emailJobsSQLite
	if url[:len("postgres")] == "postgres" {
		ddl = emailJobsPostgres
	}
	if _, err := inboxtest.Open(t, url).ExecContext(context.Background(), ddl); err != nil {
		t.Fatal(err)
	}
}

func TestPublishingSamples(t *testing.T) {
	ctx := context.Background()
	url := inboxtest.SQLite(t)
	db := inboxtest.Open(t, url)
	emailTable(t, url)
	for _, q := range []string{invoiceJobsSQLite, invoiceInsertOnce, invoiceInsertOnce} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	b := inboxtest.NewBroker(t, url)
	first, err := queueInvoice(ctx, b, "inv-2")
	if err != nil {
		t.Fatal(err)
	}
	again, err := queueInvoice(ctx, b, "inv-2")
	if err != nil || again != first {
		t.Fatalf("the key queued again: id %d, first %d, err %v", again, first, err)
	}
	if n, err := inbox.Count(ctx, b, invoices); err != nil || n.Available != 2 {
		t.Fatalf("invoice rows %+v, %v; want 2 (inv-1 once, inv-2 once)", n, err)
	}
	ids, err := publishLater(ctx, b, inboxtest.Epoch.Add(24*time.Hour))
	if err != nil || len(ids) != 2 || ids[0] >= ids[1] {
		t.Fatalf("publish many: ids %v, %v", ids, err)
	}
	if n, err := inbox.Count(ctx, b, emails); err != nil || n.Available != 2 || n.Held != 2 {
		t.Fatalf("email rows %+v, %v; want 2 available and 2 delayed", n, err)
	}
}

func TestOutcomesSample(t *testing.T) {
	ctx := context.Background()
	url := inboxtest.SQLite(t)
	emailTable(t, url)
	b := inboxtest.NewBroker(t, url)
	rec := inboxtest.NewRecorder(t, b, emails)
	svc := inbox.NewService("mailer", "test", b)
	if _, err := inbox.Handle(svc, emails, rec.Wrap("a", deliver), rec.Observe("a")); err != nil {
		t.Fatal(err)
	}
	run := inboxtest.Start(t, svc)
	want := map[string]inbox.Outcome{"busy": inbox.Retried, "nobody": inbox.Parked, "grey": inbox.Snoozed, "ok": inbox.Acked}
	for p, o := range want {
		id, err := inbox.Publish(ctx, b, emails, EmailJob{Payload: []byte(p)})
		if err != nil {
			t.Fatal(err)
		}
		if h := rec.WaitHandled(id); h.Outcome != o {
			t.Fatalf("%s: %v, want %s", p, h, o)
		}
	}
	rows := inboxtest.Rows(t, b, emails)
	for _, r := range rows {
		switch {
		case r.State == inboxtest.Parked && r.Attempts == 1:
		case r.State != inboxtest.Parked && strings.HasSuffix(r.LastError, errRateLimited.Error()) && r.LockedUntil.Sub(run.Now()) > 50*time.Second:
		case r.State != inboxtest.Parked && r.Attempts == 0 && r.LockedUntil.Sub(run.Now()) > 4*time.Minute:
		default:
			t.Errorf("row %v", r)
		}
	}
	if len(rows) != 3 {
		t.Fatalf("rows %v; want the retried, the parked and the snoozed", rows)
	}
}

func TestPostgresGuideSamples(t *testing.T) {
	ctx := context.Background()
	url := inboxtest.Postgres(t)
	emailTable(t, url)
	db := inboxtest.Open(t, url)
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, customer text NOT NULL);
		CREATE TABLE welcomed (tenant text NOT NULL, email_id bigint PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}

	t.Run("your pool, the database's clock, advisory form", func(t *testing.T) {
		b, err := openOnYourPool(ctx, url)
		if err != nil {
			t.Fatalf("the pool sample: %v", err)
		}
		defer b.Close()
		got := make(chan int64, 1)
		sub, err := subscribeAdvisory(b, func(ctx context.Context, job EmailJob) error { got <- job.ID; return nil })
		if err != nil {
			t.Fatalf("the advisory sample: %v", err)
		}
		stop := inboxtest.RunSubscription(t, sub)
		defer stop()
		id, err := publishWelcome(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		if h := within(t, got, "the row handled in the advisory form"); h != id {
			t.Fatalf("handled %d, published %d", h, id)
		}
	})

	t.Run("notifications, a transaction, HandleTx", func(t *testing.T) {
		b, err := openListening(ctx, url)
		if err != nil {
			t.Fatalf("the notify sample: %v", err)
		}
		defer b.Close()
		svc := inbox.NewService("welcome", "test", b)
		if err := subscribeTx(svc); err != nil {
			t.Fatalf("the HandleTx sample: %v", err)
		}
		inboxtest.StartLive(t, svc)
		if err := placeOrder(ctx, b, db, "ada@example.com"); err != nil {
			t.Fatalf("the PublishTx sample: %v", err)
		}
		if _, err := db.ExecContext(ctx, emailInsert); err != nil { // a plain-SQL producer, woken by the trigger
			t.Fatal(err)
		}
		inboxtest.WaitDrained(t, b, emails)
		var welcomed int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM welcomed`).Scan(&welcomed); err != nil || welcomed != 2 {
			t.Fatalf("welcomed %d, %v; want 2", welcomed, err)
		}
	})
}
