package readme_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
)

// README, "A first service": the row type.
type EmailJob struct {
	ID          int64      `db:"id" inbox:"id,generated"`
	LockedUntil *time.Time `db:"locked_until" inbox:"locked_until"`
	Payload     []byte     `db:"payload" inbox:"payload"`
	Tenant      string     `db:"tenant" inbox:"group"`
	Attempts    int        `db:"attempts" inbox:"attempts"`
	LastError   *string    `db:"last_error" inbox:"last_error"`
}

// README, "A first service": the table on SQLite.
const emailJobsSQLite = `
CREATE TABLE email_jobs (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    locked_until DATETIME,
    payload      BLOB NOT NULL,
    tenant       TEXT NOT NULL DEFAULT '',
    attempts     INTEGER NOT NULL DEFAULT 0,
    last_error   TEXT
);
CREATE INDEX email_jobs_tenant_id ON email_jobs (tenant, id);
`

// README, "A first service": the table on Postgres.
const emailJobsPostgres = `
CREATE TABLE email_jobs (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    locked_until timestamptz,
    payload      jsonb NOT NULL,
    tenant       text NOT NULL DEFAULT '',
    attempts     integer NOT NULL DEFAULT 0,
    last_error   text
);
CREATE INDEX email_jobs_tenant_id ON email_jobs (tenant, id);
`

// docs/production.md, "MariaDB and MySQL": the README's table there.
const emailJobsMySQL = `
CREATE TABLE email_jobs (
    id           BIGINT AUTO_INCREMENT PRIMARY KEY,
    locked_until DATETIME(6),
    payload      JSON NOT NULL,
    tenant       VARCHAR(255) NOT NULL DEFAULT '',
    attempts     INT NOT NULL DEFAULT 0,
    last_error   TEXT,
    KEY email_jobs_tenant_id (tenant, id)
) ENGINE=InnoDB;
`

// README, "A first service": a producer in plain SQL.
const emailInsert = `
INSERT INTO email_jobs (tenant, payload) VALUES ('acme', '{"to": "ada@example.com"}');
`

// Email is what an email job's payload holds.
type Email struct {
	To string `json:"to"`
}

// outbox records what smtpSend was given, in place of a mail server.
var outbox = struct {
	sync.Mutex
	sent []string
	c    chan string
}{c: make(chan string, 64)}

func smtpSend(ctx context.Context, tenant string, e Email) error {
	outbox.Lock()
	outbox.sent = append(outbox.sent, tenant+":"+e.To)
	outbox.Unlock()
	select {
	case outbox.c <- tenant + ":" + e.To:
	default:
	}
	return nil
}

// sentTo returns what smtpSend was given since the last call, and forgets it.
func sentTo() []string {
	outbox.Lock()
	defer outbox.Unlock()
	s := outbox.sent
	outbox.sent = nil
	return s
}

// drainOutbox forgets every email sent so far.
func drainOutbox() {
	sentTo()
	for {
		select {
		case <-outbox.c:
		default:
			return
		}
	}
}

// README, "A first service".
var emails = inbox.MustQueue[EmailJob]("email_jobs")

func sendEmail(ctx context.Context, job EmailJob) error {
	var e Email
	if err := json.Unmarshal(job.Payload, &e); err != nil {
		return inbox.Park(err) // it will never decode: keep the row, stop trying
	}
	return smtpSend(ctx, job.Tenant, e) // nil deletes the row; an error retries it later
}

// newMailer takes the handler, and options such as a test's recorder, so a
// test can run the service as it runs in production.
func newMailer(b *inbox.Broker, send inbox.Handler[EmailJob], opts ...inbox.SubOption) (*inbox.Service, error) {
	svc := inbox.NewService("mailer", "1.0.0", b)
	if _, err := inbox.Handle(svc, emails, send, append(opts, inbox.Workers(4))...); err != nil {
		return nil, err
	}
	// One tenant's rows with workers of their own (this needs the group's index).
	if _, err := inbox.Handle(svc, emails.Group("bigco"), send, append(opts, inbox.Workers(2))...); err != nil {
		return nil, err
	}
	return svc, nil
}

func runMailer(ctx context.Context, dbURL string) error {
	b, err := inbox.Open(dbURL) // "sqlite:///var/lib/app/app.db", "postgres://user@host/app" or "mysql://user:pass@host:3306/app"
	if err != nil {
		return err
	}
	defer b.Close()
	svc, err := newMailer(b, sendEmail)
	if err != nil {
		return err
	}
	return svc.Run(ctx) // until ctx ends, or SIGINT/SIGTERM
}

// publishWelcome is the README's producer through the library.
func publishWelcome(ctx context.Context, b *inbox.Broker) (int64, error) {
	id, err := inbox.Publish(ctx, b, emails, EmailJob{Tenant: "acme", Payload: []byte(`{"to": "ada@example.com"}`)})
	return id, err
}

// README, "A first test".
func TestSendEmail(t *testing.T) {
	ctx := context.Background()
	b := inboxtest.NewBroker(t, inboxtest.SQLite(t)) // a database of its own, on a fake clock
	if _, err := b.DB().ExecContext(ctx, emailJobsSQLite); err != nil {
		t.Fatal(err)
	}
	svc, err := newMailer(b, sendEmail)
	if err != nil {
		t.Fatal(err)
	}
	inboxtest.Start(t, svc) // runs until the test ends

	if _, err := inbox.Publish(ctx, b, emails, EmailJob{Tenant: "acme", Payload: []byte(`{"to": "ada@example.com"}`)}); err != nil {
		t.Fatal(err)
	}
	inboxtest.WaitDrained(t, b, emails) // the row was handled and deleted
	if got := sentTo(); len(got) != 1 || got[0] != "acme:ada@example.com" {
		t.Fatalf("sent %v", got)
	}

	bad, err := inbox.Publish(ctx, b, emails, EmailJob{Tenant: "acme", Payload: []byte("not json")})
	if err != nil {
		t.Fatal(err)
	}
	inboxtest.WaitRows(t, b, emails, "the bad row parked", func(rows []inboxtest.Row) bool {
		return len(rows) == 1 && rows[0].ID == bad && rows[0].State == inboxtest.Parked
	})
}

// failFirst fails each email's first try, as a busy mail server would.
func failFirst(send inbox.Handler[EmailJob]) inbox.Handler[EmailJob] {
	var mu sync.Mutex
	tried := map[int64]bool{}
	return func(ctx context.Context, job EmailJob) error {
		mu.Lock()
		first := !tried[job.ID]
		tried[job.ID] = true
		mu.Unlock()
		if first {
			return errors.New("smtp: 421 try again later")
		}
		return send(ctx, job)
	}
}

// docs/testing.md, "A retry, without sleeping".
func TestMailerRetries(t *testing.T) {
	ctx := context.Background()
	b := inboxtest.NewBroker(t, inboxtest.SQLite(t)) // or inboxtest.Postgres(t); a fake clock at inboxtest.Epoch
	if _, err := b.DB().ExecContext(ctx, emailJobsSQLite); err != nil {
		t.Fatal(err)
	}
	rec := inboxtest.NewRecorder(t, b, emails) // records every handling of the queue
	svc, err := newMailer(b, rec.Wrap("a", failFirst(sendEmail)), rec.Observe("a"))
	if err != nil {
		t.Fatal(err)
	}
	run := inboxtest.Start(t, svc) // returns once started; stopped (or the test fails) at cleanup

	id, err := inbox.Publish(ctx, b, emails, EmailJob{Tenant: "acme", Payload: []byte(`{"to": "ada@example.com"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if h := rec.WaitHandled(id); h.Outcome != inbox.Retried {
		t.Fatalf("first try: %v", h)
	}
	t.Log(inboxtest.Rows(t, b, emails)) // id 1: locked until 2026-01-01T00:00:00.9...Z, attempts 1, last error "smtp: 421 ..."
	run.Advance(time.Second)            // waits until the service is idle, then moves the clock past the backoff
	// The handling after the one WaitHandled returned (WaitHandled again would return that one).
	if h := rec.WaitNextHandled(id); h.Outcome != inbox.Acked {
		t.Fatalf("second try: %v", h)
	}
	rec.WaitDrained()
	if n := rec.Count(id); n != 2 { // the failed try, then the one that went
		t.Fatalf("handled %d times, want 2", n)
	}
	rec.NoOverlaps() // never held by two holders at once
}

// The first service as the README runs it, on each database: the table
// made from the README's DDL, a row written by its plain SQL, another by
// Publish, and one of the group the second subscription serves.
//
// It runs after the other tests that send email, and leaves the outbox
// empty: TestSendEmail reads all of it.
func TestFirstService(t *testing.T) {
	drainOutbox()
	t.Cleanup(drainOutbox)
	for _, db := range []struct{ name, ddl string }{{"sqlite", emailJobsSQLite}, {"postgres", emailJobsPostgres}, {"mysql", emailJobsMySQL}} {
		t.Run(db.name, func(t *testing.T) {
			url := inboxtest.SQLite(t)
			switch db.name {
			case "postgres":
				url = inboxtest.Postgres(t)
			case "mysql":
				url = inboxtest.MySQL(t)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			pool := inboxtest.Open(t, url)
			for _, q := range []string{db.ddl, emailInsert} {
				if _, err := pool.ExecContext(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			b := inboxtest.NewBroker(t, url)
			if _, err := publishWelcome(ctx, b); err != nil {
				t.Fatal(err)
			}
			if _, err := inbox.Publish(ctx, b, emails, EmailJob{Tenant: "bigco", Payload: []byte(`{"to": "bob@example.com"}`)}); err != nil {
				t.Fatal(err)
			}
			drainOutbox()
			done := make(chan error, 1)
			go func() { done <- runMailer(ctx, url) }()
			want := map[string]int{"acme:ada@example.com": 2, "bigco:bob@example.com": 1}
			for n := 0; n < 3; n++ {
				got := within(t, outbox.c, "the emails sent")
				if want[got]--; want[got] < 0 {
					t.Fatalf("sent %q more often than written", got)
				}
			}
			cancel()
			if err := within(t, done, "the mailer to stop"); err != nil {
				t.Fatalf("the mailer: %v", err)
			}
		})
	}
}
