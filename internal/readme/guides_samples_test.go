package readme_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlinbox/sqlinbox/claim/advisory"
	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// docs/publishing.md, "Keys".
type InvoiceJob struct {
	ID          int64      `db:"id" inbox:"id,generated"`
	LockedUntil *time.Time `db:"locked_until" inbox:"locked_until"`
	Payload     []byte     `db:"payload" inbox:"payload"`
	Key         string     `db:"invoice_key" inbox:"key"`
	Priority    int16      `db:"priority" inbox:"priority"`
}

// The table of InvoiceJob on SQLite, with the indexes its key and its
// priority need.
const invoiceJobsSQLite = `
CREATE TABLE invoice_jobs (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    locked_until DATETIME,
    payload      BLOB NOT NULL,
    invoice_key  TEXT,
    priority     INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX invoice_jobs_invoice_key ON invoice_jobs (invoice_key);
CREATE INDEX invoice_jobs_priority_id ON invoice_jobs (priority, id);
`

// docs/publishing.md, "Keys": a producer in plain SQL.
const invoiceInsertOnce = `
INSERT INTO invoice_jobs (payload, invoice_key) VALUES ('{"invoice": 1}', 'inv-1')
ON CONFLICT (invoice_key) DO NOTHING;
`

var invoices = inbox.MustQueue[InvoiceJob]("invoice_jobs")

// docs/publishing.md, "Keys".
func queueInvoice(ctx context.Context, b *inbox.Broker, key string) (int64, error) {
	id, err := inbox.Publish(ctx, b, invoices, InvoiceJob{Key: key, Payload: []byte(`{}`)})
	if errors.Is(err, inbox.ErrDuplicate) {
		return id, nil // already queued: id is the queued row's
	}
	return id, err
}

// docs/publishing.md, "Later, and many at once".
func publishLater(ctx context.Context, b *inbox.Broker, tomorrow time.Time) ([]int64, error) {
	_, err := inbox.Publish(ctx, b, emails, EmailJob{Payload: []byte(`{"to": "ada@example.com"}`)}, inbox.Delay(time.Hour))
	if err != nil {
		return nil, err
	}
	_, err = inbox.Publish(ctx, b, emails, EmailJob{Payload: []byte(`{"to": "bob@example.com"}`)}, inbox.At(tomorrow))
	if err != nil {
		return nil, err
	}
	batch := []EmailJob{{Payload: []byte(`{"to": "a@example.com"}`)}, {Payload: []byte(`{"to": "b@example.com"}`)}}
	ids, err := inbox.PublishMany(ctx, b, emails, batch) // every row or none; ids in the rows' order
	return ids, err
}

// docs/publishing.md, "In your transaction".
func placeOrder(ctx context.Context, b *inbox.Broker, db *sql.DB, to string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() // a no-op once committed
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (customer) VALUES ($1)`, to); err != nil {
		return err
	}
	payload := fmt.Appendf(nil, `{"to": %q}`, to)
	if _, err := inbox.PublishTx(ctx, b, tx, emails, EmailJob{Payload: payload}); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	b.Wake("email_jobs", "") // without ListenNotify on Postgres: the claim may have looked before the commit
	return nil
}

// docs/instances.md, "Notifications".
func openListening(ctx context.Context, url string) (*inbox.Broker, error) {
	b, err := inbox.Open(url, inbox.ListenNotify()) // Postgres only: one pool connection listens
	if err != nil {
		return nil, err
	}
	// Rows other programs insert notify too, naming the groups they wrote:
	err = migrations.ApplyGroupNotifyTrigger(ctx, b.DB(), "email_jobs", "tenant")
	if err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// docs/instances.md, "Pools and connections".
func openOnYourPool(ctx context.Context, url string) (*inbox.Broker, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 20 // yours to size: the broker leaves it as it is
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	b, err := inbox.New(pool, inbox.WithClock(clock.Database{})) // every time from the database's now()
	if err != nil {
		pool.Close()
		return nil, err
	}
	return b, nil
}

// docs/claim-forms.md.
func subscribeAdvisory(b *inbox.Broker, handle inbox.Handler[EmailJob]) (*inbox.Subscription, error) {
	sub, err := inbox.Subscribe(b, emails, handle, inbox.Form(advisory.Form), inbox.Workers(16))
	return sub, err
}

// errRateLimited and friends stand for what a mail server answers.
var (
	errRateLimited = errors.New("smtp: 421 rate limited")
	errNoMailbox   = errors.New("smtp: 550 no such mailbox")
	errGreylisted  = errors.New("smtp: 451 greylisted")
)

// docs/retries.md, "Outcomes".
func deliver(ctx context.Context, job EmailJob) error {
	err := smtpTry(ctx, job)
	switch {
	case errors.Is(err, errRateLimited):
		return inbox.RetryAfter(time.Minute, err) // the attempt counts; back in a minute
	case errors.Is(err, errNoMailbox):
		return inbox.Park(err) // will never succeed: parked now, kept for a look
	case errors.Is(err, errGreylisted):
		return inbox.Snooze(5 * time.Minute) // back in five minutes, no attempt used
	}
	return err // nil acks; any other error retries after the backoff
}

// docs/retries.md, "Transactional handling".
func recordWelcome(ctx context.Context, tx *sql.Tx, job EmailJob) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO welcomed (tenant, email_id) VALUES ($1, $2)`, job.Tenant, job.ID)
	return err // nil: this insert and the row's delete commit together; an error rolls both back
}

func subscribeTx(svc *inbox.Service) error {
	_, err := inbox.HandleTx(svc, emails, recordWelcome, inbox.Workers(2), inbox.MaxAttempts(5))
	return err
}
