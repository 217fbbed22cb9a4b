package readme_test

import (
	"context"
	"database/sql"
	"net/http"
	"time"

	"github.com/sqlinbox/sqlinbox/claim/rowlock"
	"github.com/sqlinbox/sqlinbox/dashboard"
	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/lock"
	"github.com/sqlinbox/sqlinbox/migrations"
	"github.com/sqlinbox/sqlinbox/schedule"
)

// The struct of the invoice samples (docs/testing.md and the examples).
type RenderInvoice struct {
	ID          int64      `db:"id" inbox:"id,generated"`
	LockedUntil *time.Time `db:"locked_until" inbox:"locked_until"`
	Payload     []byte     `db:"payload" inbox:"payload"`
	Attempts    int        `db:"attempts" inbox:"attempts"`
}

// rendered receives what render was given.
var rendered = make(chan []byte, 16)

func render(ctx context.Context, payload []byte) error {
	select {
	case rendered <- payload:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// A service on the reference table.
func runService(ctx context.Context, dbURL string) error {
	b, err := inbox.Open(dbURL, inbox.PollInterval(250*time.Millisecond)) // e.g. "sqlite:///var/lib/app/jobs.db"
	if err != nil {
		return err
	}
	defer b.Close()

	svc := inbox.NewService("invoices", "1.0.0", b)
	svc.OnStart(func(ctx context.Context) error { return migrations.Apply(ctx, b.DB(), "invoice_jobs") })
	queue := inbox.MustQueue[RenderInvoice]("invoice_jobs")
	_, err = inbox.Handle(svc, queue, func(ctx context.Context, job RenderInvoice) error {
		return render(ctx, job.Payload) // nil acks (deletes) the row; an error retries it
	}, inbox.Workers(4))
	if err != nil {
		return err
	}
	return svc.Run(ctx) // until ctx ends, or SIGINT/SIGTERM
}

// docs/claim-forms.md.
func subscribeRowLock(b *inbox.Broker, q inbox.Queue[RenderInvoice], handle inbox.Handler[RenderInvoice]) (*inbox.Subscription, error) {
	sub, err := inbox.Subscribe(b, q, handle, inbox.Form(rowlock.Form), inbox.Workers(8))
	return sub, err
}

// docs/instances.md, "Notifications".
func installTrigger(ctx context.Context, db *sql.DB) error {
	err := migrations.ApplyNotifyTrigger(ctx, db, "invoice_jobs") // one NOTIFY per INSERT statement
	return err
}

// docs/locks.md.
func takeLock(ctx context.Context, db *sql.DB) error {
	store, err := lock.NewSQL(ctx, db) // after migrations.ApplyLocks(ctx, db)
	if err != nil {
		return err
	}
	locker, err := lock.New(store, lock.Namespace("shop"))
	if err != nil {
		return err
	}
	h, ok, err := locker.Take(ctx, "payment-service",
		lock.MaxHolders(3), lock.Wait(20*time.Second), lock.TTL(time.Minute))
	if err != nil {
		return err
	}
	if ok {
		defer locker.Release(ctx, h.Token)
	}
	return nil
}

// packed and reported count the runs of the schedules sample.
var packed, reported = make(chan int64, 1024), make(chan struct{}, 16)

func packPaidOrders(ctx context.Context, mine func(order int64) bool) error {
	for order := range int64(8) {
		if mine(order) {
			packed <- order
		}
	}
	return nil
}

func report(ctx context.Context, r schedule.Run) error {
	reported <- struct{}{}
	return nil
}

// docs/schedules.md.
func runSchedules(ctx context.Context, db *sql.DB, started chan<- struct{}) error {
	s, err := schedule.New(db) // options: Instance, DefaultWorkers (one per core), WithClock (the host's)...
	if err != nil {
		return err
	}
	err = s.Add("pack_orders", schedule.Every(10*time.Second), schedule.EveryWorker,
		func(ctx context.Context, r schedule.Run) error {
			return packPaidOrders(ctx, func(order int64) bool { return r.Owns(order) })
		})
	if err != nil {
		return err
	}
	err = s.Add("nightly_report", schedule.Cron("0 2 * * *", "Europe/Paris"), schedule.One, report)
	if err != nil {
		return err
	}
	err = s.Start(ctx) // writes this instance's heartbeats, then fires moments
	if err != nil {
		return err
	}
	defer s.Stop(context.Background()) // leaves at once; waits for running handlers
	close(started)
	<-ctx.Done()
	return nil
}

// docs/operating.md, "Registering a service".
func registered(b *inbox.Broker) (*inbox.Service, error) {
	svc := inbox.NewService("invoices", "1.4.0", b)
	svc.OnStart(func(ctx context.Context) error { return migrations.ApplyRegistry(ctx, b.DB()) })
	if err := svc.Register(); err != nil { // options: RegistryHeartbeat (the poll interval), RegistryKeep (24h)
		return nil, err
	}
	return svc, nil
}

// requireAdmin stands for the application's own access check.
func requireAdmin(h http.Handler) http.Handler { return h }

// docs/operating.md, "The dashboard".
func dashboardMux(b *inbox.Broker) *http.ServeMux {
	h, err := dashboard.New(b) // dashboard.ReadOnly() shows no actions
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/admin/inbox/", http.StripPrefix("/admin/inbox", requireAdmin(h)))
	return mux
}
