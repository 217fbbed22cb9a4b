package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"modernc.org/sqlite"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// RenderInvoice is a row of invoice_jobs: a shop writes one per invoice to
// render, with plain SQL. The group keeps one run's invoices apart from
// any other rows of the table: a run handles only the rows it wrote.
type RenderInvoice struct {
	ID          int64      `db:"id" inbox:"id,generated"`
	LockedUntil *time.Time `db:"locked_until" inbox:"locked_until"`
	Payload     []byte     `db:"payload" inbox:"payload"`
	Group       string     `db:"group_name" inbox:"group"`
	Attempts    int        `db:"attempts" inbox:"attempts"`
	// Key names the invoice: while its row is queued, the same invoice
	// written again is not queued twice (a unique index; see Migrate).
	Key string `db:"invoice_key" inbox:"key"`
}

// Invoice is what a payload holds.
type Invoice struct {
	Number   int     `json:"invoice"`
	Customer string  `json:"customer"`
	Total    float64 `json:"total"`
}

// Table is where the shop writes invoices to render.
const Table = "invoice_jobs"

// Queue is the invoice queue: the whole table. Queue.Group(g) is one run's.
var Queue = inbox.MustQueue[RenderInvoice](Table)

// SendTable is where a rendered invoice waits to be sent, queued by the
// instance that rendered it (the same columns as Table), and SentTable
// records each invoice sent: one row per invoice, written in the
// transaction that acks its send row (inbox.HandleTx), so a send delivered
// twice is recorded once. It has no unique index on purpose: the demo
// counts, and a second record would show.
const (
	SendTable = "invoice_sends"
	SentTable = "invoices_sent"
)

// SendQueue is the queue of invoices to send.
var SendQueue = inbox.MustQueue[RenderInvoice](SendTable)

// RenderTime is how long rendering one invoice takes (a PDF would take
// longer): with it the two instances share the work, as they would in
// production, instead of the first to wake rendering every invoice in the
// time the other takes to poll.
const RenderTime = 50 * time.Millisecond

// Rendered is one invoice rendered by one instance.
type Rendered struct {
	Instance string
	Invoice  int
	Path     string
}

// Instance is one running copy of the invoice service.
type Instance struct {
	Name    string
	Broker  *inbox.Broker
	Service *inbox.Service
	Render  *inbox.Subscription
}

// NewInstance makes one instance of the service on its own pool: render
// with four workers, a poll every quarter second, the table created at start.
// Each rendered invoice is written under outDir and reported on done.
func NewInstance(name, url string, q inbox.Queue[RenderInvoice], outDir string, done chan<- Rendered, opts ...inbox.Option) (*Instance, error) {
	b, err := inbox.Open(url, append([]inbox.Option{inbox.PollInterval(250 * time.Millisecond)}, opts...)...)
	if err != nil {
		return nil, err
	}
	svc, sub, err := NewService(name, b, q, Renderer(name, outDir, done))
	if err != nil {
		b.Close()
		return nil, err
	}
	return &Instance{Name: name, Broker: b, Service: svc, Render: sub}, nil
}

// NewService makes instance name's invoice service of queue q on broker b, the tables
// (and the registry's) created at start, registered: render with four workers, each rendered invoice then
// queued to send (keyed, so it is queued once while it waits); and send
// with two workers, each send recorded in SentTable in the transaction of
// its ack. The slow render runs outside any transaction: on SQLite a
// transactional handling holds the database's one write lock from its
// start to its commit, so the transactional step is kept to the write it
// makes. Tests pass their own handler around Renderer, and options such
// as inbox.Observe, for the render subscription.
func NewService(name string, b *inbox.Broker, q inbox.Queue[RenderInvoice], render inbox.Handler[RenderInvoice], opts ...inbox.SubOption) (*inbox.Service, *inbox.Subscription, error) {
	svc := inbox.NewService("invoices", "1.0.0", b)
	svc.Signals = false
	svc.OnStart(func(ctx context.Context) error { return Migrate(ctx, b.DB()) })
	// Registered, so `inbox queues` and `inbox dashboard` on the same
	// database show the queues and their instances while they run.
	svc.OnStart(func(ctx context.Context) error { return migrations.ApplyRegistry(ctx, b.DB()) })
	if err := svc.Register(); err != nil {
		return nil, nil, err
	}
	sends := SendQueue
	if g := q.GroupName(); g != "" {
		sends = sends.Group(g)
	}
	sub, err := inbox.Handle(svc, q, func(ctx context.Context, job RenderInvoice) error {
		if err := render(ctx, job); err != nil {
			return err
		}
		_, err := inbox.Publish(ctx, b, sends, RenderInvoice{Payload: job.Payload, Group: job.Group, Key: job.Key})
		if errors.Is(err, inbox.ErrDuplicate) {
			return nil // rendered again while its send waits: it is queued once
		}
		return err
	}, append([]inbox.SubOption{inbox.Workers(4)}, opts...)...)
	if err != nil {
		return nil, nil, err
	}
	if _, err := inbox.HandleTx(svc, sends, Sender(name, b.Dialect()), inbox.Workers(2)); err != nil {
		return nil, nil, err
	}
	return svc, sub, nil
}

// Sender sends an invoice (here: records it) inside the transaction that
// acks its send row: the record and the ack commit together, or neither.
// db names the database, as Broker.Dialect does.
func Sender(instance, db string) inbox.TxHandler[RenderInvoice] {
	return func(ctx context.Context, tx *sql.Tx, job RenderInvoice) error {
		_, err := tx.ExecContext(ctx, bind(db, "INSERT INTO invoices_sent (invoice_key, group_name, instance) VALUES ($1, $2, $3)"), job.Key, job.Group, instance)
		return err
	}
}

// SentCounts reads how often each invoice of group was recorded sent.
func SentCounts(ctx context.Context, db *sql.DB, group string) (map[string]int, error) {
	rows, err := db.QueryContext(ctx, bind(kindOf(db), "SELECT invoice_key, count(*) FROM invoices_sent WHERE group_name = $1 GROUP BY invoice_key"), group)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			return nil, err
		}
		out[k] = n
	}
	return out, rows.Err()
}

// Renderer is the handler of instance name: it writes each invoice under
// outDir and reports it on done.
func Renderer(name, outDir string, done chan<- Rendered) inbox.Handler[RenderInvoice] {
	return func(ctx context.Context, job RenderInvoice) error {
		var inv Invoice
		if err := json.Unmarshal(job.Payload, &inv); err != nil {
			return fmt.Errorf("invoice job %d: payload is not an invoice: %w", job.ID, err)
		}
		select {
		case <-time.After(RenderTime):
		case <-ctx.Done():
			return ctx.Err()
		}
		path := filepath.Join(outDir, fmt.Sprintf("invoice-%04d.txt", inv.Number))
		text := fmt.Sprintf("INVOICE %d\nCustomer: %s\nTotal: %.2f EUR\nRendered by: %s\n", inv.Number, inv.Customer, inv.Total, name)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			return err
		}
		done <- Rendered{Instance: name, Invoice: inv.Number, Path: path}
		return nil
	}
}

// Migrate makes the invoice tables: Table and SendTable, each the
// reference inbox table with the invoice_key column and its unique index,
// and SentTable. Safe to run again, and from two instances at once (one
// transaction).
func Migrate(ctx context.Context, db *sql.DB) error {
	for _, t := range []string{Table, SendTable} {
		if err := migrations.Apply(ctx, db, t); err != nil {
			return err
		}
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	kind := kindOf(db)
	for _, t := range []string{Table, SendTable} {
		has := 0
		add := "ALTER TABLE " + t + " ADD COLUMN IF NOT EXISTS invoice_key text"
		index := "CREATE UNIQUE INDEX IF NOT EXISTS " + t + "_invoice_key ON " + t + " (invoice_key)"
		switch kind {
		case "sqlite":
			// SQLite has no ADD COLUMN IF NOT EXISTS.
			if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM pragma_table_info('"+t+"') WHERE name = 'invoice_key'").Scan(&has); err != nil {
				return err
			}
			add = "ALTER TABLE " + t + " ADD COLUMN invoice_key text"
		case "mysql":
			// MySQL has neither IF NOT EXISTS; a unique index takes a
			// VARCHAR, not a TEXT, whole.
			if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = '"+t+"' AND column_name = 'invoice_key'").Scan(&has); err != nil {
				return err
			}
			add = "ALTER TABLE " + t + " ADD COLUMN invoice_key VARCHAR(255), ADD UNIQUE INDEX " + t + "_invoice_key (invoice_key)"
			index = ""
		}
		for _, ddl := range []string{add, index} {
			if ddl == "" || ddl == add && has > 0 {
				continue
			}
			if _, err := tx.ExecContext(ctx, ddl); err != nil {
				var me *mysql.MySQLError
				if errors.As(err, &me) && me.Number == 1060 {
					continue // the other instance, starting beside, added it
				}
				return fmt.Errorf("migrate %s: %w", t, err)
			}
		}
	}
	if _, err := tx.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS invoices_sent (invoice_key text NOT NULL, group_name text NOT NULL, instance text NOT NULL)"); err != nil {
		return fmt.Errorf("migrate %s: %w", SentTable, err)
	}
	return tx.Commit()
}

// WriteInvoices is the shop: it writes invoices from..from+n-1 of group to
// render with plain SQL, as any program could, on a connection of its own.
// Each row's key names its invoice (in its group): an invoice written again
// while its row is queued is not queued again.
func WriteInvoices(ctx context.Context, db *sql.DB, group string, from, n int) error {
	insert := "INSERT INTO invoice_jobs (group_name, payload, invoice_key) VALUES ($1, $2, $3) ON CONFLICT (invoice_key) DO NOTHING"
	switch kindOf(db) {
	case "sqlite":
		insert = "INSERT INTO invoice_jobs (group_name, payload, invoice_key) VALUES (?, ?, ?) ON CONFLICT (invoice_key) DO NOTHING"
	case "mysql": // no ON CONFLICT: a row whose key is queued is ignored
		insert = "INSERT IGNORE INTO invoice_jobs (group_name, payload, invoice_key) VALUES (?, ?, ?)"
	}
	customers := []string{"Ada Lovelace", "Grace Hopper", "Edsger Dijkstra", "Barbara Liskov", "Ken Thompson"}
	for i := from; i < from+n; i++ {
		payload, _ := json.Marshal(Invoice{Number: i, Customer: customers[i%len(customers)], Total: float64(i*37%500) + 0.99})
		if _, err := db.ExecContext(ctx, insert, group, payload, InvoiceKey(group, i)); err != nil {
			return fmt.Errorf("shop: write invoice %d: %w", i, err)
		}
	}
	return nil
}

// InvoiceKey is the key of invoice n of group.
func InvoiceKey(group string, n int) string { return fmt.Sprintf("%s/invoice-%d", group, n) }

// Run starts the instances, waits until both have started, and stops them
// when ctx ends; it returns once both have stopped.
// If one instance fails, the others are stopped too.
func Run(ctx context.Context, instances ...*Instance) (started <-chan struct{}, stopped <-chan error) {
	ctx, cancel := context.WithCancel(ctx)
	ready := make(chan struct{})
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	runErr := make([]error, len(instances))
	for i, in := range instances {
		wg.Go(func() {
			if runErr[i] = in.Service.Run(ctx); runErr[i] != nil {
				cancel()
			}
		})
	}
	go func() {
		for _, in := range instances {
			select {
			case <-in.Service.Started():
			case <-ctx.Done():
			}
		}
		close(ready)
	}()
	go func() {
		wg.Wait()
		cancel()
		for _, in := range instances {
			in.Broker.Close()
		}
		for _, err := range runErr {
			if err != nil {
				errs <- err
				return
			}
		}
		errs <- nil
	}()
	return ready, errs
}

// kindOf names the database of db as Broker.Dialect does.
func kindOf(db *sql.DB) string {
	switch db.Driver().(type) {
	case *sqlite.Driver:
		return "sqlite"
	case *mysql.MySQLDriver:
		return "mysql"
	}
	return "postgres"
}

// bind writes Postgres's $n parameters as SQLite's ?n, or MySQL's ?, for
// the database named kind. The statements name each parameter once, in
// order.
func bind(kind, q string) string {
	switch kind {
	case "sqlite":
		return strings.ReplaceAll(q, "$", "?")
	case "mysql":
		return dollarN.ReplaceAllString(q, "?")
	}
	return q
}

var dollarN = regexp.MustCompile(`\$\d+`)
