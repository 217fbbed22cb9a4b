// Command shop is the two custom calls of a shop, kept in order by locks:
// "send invoice" runs once per order however many calls ask, on whichever
// server, and "charge payment" keeps a payment service that takes three
// calls at a time to three. Each server is a process with its own database
// pool, locker and scheduler; the servers share one database (a SQLite file
// or Postgres), so the locks are what keeps them apart.
//
// Beside the calls, the schedule pack_orders fires every 10 seconds in every
// worker of every server: each run packs the paid orders whose number modulo
// Workers is its Worker, each under the order's lock, and the server prints
// each run.
//
//	go run ./examples/shop --demo                 # two servers as two processes on a fresh SQLite file: fire both scenarios, pack the orders, stop them
//	go run ./examples/shop --demo --pack-every 2s --pack-workers 3 --orders 50
//	go run ./examples/shop --demo --db postgres://postgres@127.0.0.1:5432/test?sslmode=disable
//	go run ./examples/shop --name shop-a --addr 127.0.0.1:8080 --db sqlite://shop.db   # one server; start another with its own name and address
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/lock"
	"github.com/sqlinbox/sqlinbox/migrations"
	"github.com/sqlinbox/sqlinbox/schedule"
)

func main() {
	dbURL := flag.String("db", "", "database URL: sqlite://path.db or postgres://...; default sqlite://shop.db, or a fresh file for --demo")
	addr := flag.String("addr", "127.0.0.1:8080", "address to serve (port 0: any free port)")
	name := flag.String("name", "shop-a", "this server's instance name, unique among the servers sharing the database")
	demo := flag.Bool("demo", false, "start two servers as two processes on one database, fire both scenarios at them, wait until pack_orders packed every paid order, stop them with SIGTERM and exit")
	packEvery := flag.Duration("pack-every", DefaultPackEvery, "how often pack_orders fires")
	workers := flag.Int("pack-workers", 2, "pack_orders runs per server at each moment")
	orders := flag.Int("orders", 20, "orders to seed (1..N; every fifth unpaid) for pack_orders to pack")
	flag.Parse()

	// SIGTERM (what a service manager sends) ends a server as Ctrl-C does:
	// the schedule stops and removes its heartbeats, the listener closes.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *demo {
		if err := runDemo(ctx, demoConfig{DB: *dbURL, PackEvery: *packEvery, Workers: *workers, Orders: *orders}); err != nil {
			log.Fatal(err)
		}
		return
	}
	if *dbURL == "" {
		*dbURL = "sqlite://shop.db"
	}
	if err := serve(ctx, *name, *addr, *dbURL, *packEvery, *workers, *orders); err != nil {
		log.Fatal(err)
	}
}

// serve runs one server until ctx ends, then stops it: its schedule leaves
// (its heartbeats are deleted) and its listener closes.
func serve(ctx context.Context, name, addr, dbURL string, every time.Duration, workers, orders int) error {
	var out sync.Mutex
	s, err := start(ctx, config{
		DB:        dbURL,
		Names:     []string{name},
		Invoices:  slowInvoices{delay: 500 * time.Millisecond},
		Payments:  &slowPayments{delay: time.Second},
		Packer:    slowPacker{delay: 20 * time.Millisecond},
		PackEvery: every,
		Workers:   workers,
		Report: func(p Packing) {
			out.Lock()
			defer out.Unlock()
			fmt.Println(p)
		},
	})
	if err != nil {
		return err
	}
	defer s.Close()
	if err := seedOrders(ctx, s.DB, s.SQL, 1, orders); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: s.Handler}
	go srv.Serve(ln)
	fmt.Printf("shop: %s listening on http://%s (database %s); pack_orders every %v; try:\n  curl -X POST http://%s/orders/1001/invoice\n",
		name, ln.Addr(), dbURL, every, ln.Addr())
	<-ctx.Done()
	srv.Shutdown(context.Background())
	if err := s.Close(); err != nil {
		return fmt.Errorf("shop: %s: stop: %w", name, err)
	}
	fmt.Printf("shop: %s stopped: pack_orders left, its heartbeats deleted\n", name)
	return nil
}

// config is what start needs: the database and the stand-ins for the
// services the shop calls, and the packing schedule's pace.
type config struct {
	DB string
	// Names are the instances to start in this process, each with its own
	// pool, locker and scheduler; nil means shop-a and shop-b.
	Names    []string
	Invoices InvoiceSender
	Payments PaymentService
	Packer   Packer
	// PackEvery is pack_orders' interval; zero means DefaultPackEvery.
	PackEvery time.Duration
	// Workers is how many runs of pack_orders each instance has per
	// moment; zero means one per core.
	Workers int
	// Clock paces the schedule; nil means the host's clock.
	Clock clock.Clock
	// Heartbeat is the schedule's heartbeat and share lease; zero means
	// schedule.DefaultHeartbeat. Tests on a fake clock that jumps a whole
	// moment at once set it longer than a moment.
	Heartbeat time.Duration
	// Report receives what each run of pack_orders did; nil means nothing.
	Report func(Packing)
}

// scheduleOptions turns the zero-means-default fields of c into the
// schedule's options, which refuse zero values.
func (c config) scheduleOptions(instance string) []schedule.Option {
	opts := []schedule.Option{schedule.Instance(instance)}
	if c.Workers > 0 {
		opts = append(opts, schedule.DefaultWorkers(c.Workers))
	}
	if c.Clock != nil {
		opts = append(opts, schedule.WithClock(c.Clock))
	}
	if c.Heartbeat > 0 {
		opts = append(opts, schedule.HeartbeatEvery(c.Heartbeat))
	}
	return opts
}

// shop is the instances running in this process.
type shop struct {
	// Handler serves the instances behind a round robin.
	Handler http.Handler
	// DB and SQL are the first instance's pool and the shop's statements,
	// for seeding and checks.
	DB  *sql.DB
	SQL Statements
	// Names are the instances' names, in order.
	Names []string

	closeOnce sync.Once
	closers   []func() error
}

// Close stops the instances' schedules (each deletes its heartbeats), then
// their lockers and pools. Only the first call does it and reports.
func (s *shop) Close() error {
	var errs []error
	s.closeOnce.Do(func() {
		for i := len(s.closers) - 1; i >= 0; i-- {
			errs = append(errs, s.closers[i]())
		}
	})
	return errors.Join(errs...)
}

// start opens instances of the shop over one database, each with a pool, a
// locker and a scheduler of its own, and serves them on one handler.
func start(ctx context.Context, cfg config) (_ *shop, err error) {
	s := &shop{Names: cfg.Names, SQL: statementsFor(cfg.DB)}
	if len(s.Names) == 0 {
		s.Names = []string{"shop-a", "shop-b"}
	}
	defer func() {
		if err != nil {
			_ = s.Close()
		}
	}()
	every := cfg.PackEvery
	if every == 0 {
		every = DefaultPackEvery
	}
	var handlers []http.Handler
	for i, name := range s.Names {
		db, err := inbox.OpenDB(cfg.DB)
		if err != nil {
			return nil, err
		}
		s.closers = append(s.closers, db.Close)
		if i == 0 {
			s.DB = db
			for _, apply := range []func(context.Context, *sql.DB) error{migrations.ApplyLocks, migrations.ApplySchedules, applyShop} {
				if err := apply(ctx, db); err != nil {
					return nil, err
				}
			}
		}
		store, err := lock.NewSQL(ctx, db)
		if err != nil {
			return nil, err
		}
		s.closers = append(s.closers, store.Close)
		l, err := lock.New(store, lock.Namespace("shop"))
		if err != nil {
			return nil, err
		}
		handlers = append(handlers, (&Shop{Name: name, DB: db, SQL: s.SQL, Locker: l, Invoices: cfg.Invoices, Payments: cfg.Payments}).Handler())

		sched, err := schedule.New(db, cfg.scheduleOptions(name)...)
		if err != nil {
			return nil, err
		}
		p := newPacker(db, s.SQL, l, cfg.Packer, cfg.Report)
		if err := sched.Add(PackSchedule, schedule.Every(every), schedule.EveryWorker, p.run); err != nil {
			return nil, err
		}
		if err := sched.Start(ctx); err != nil {
			return nil, err
		}
		s.closers = append(s.closers, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			return sched.Stop(ctx)
		})
	}
	s.Handler = RoundRobin(handlers...)
	return s, nil
}
