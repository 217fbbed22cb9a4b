// Command shop is the two custom calls of a shop, kept in order by locks:
// "send invoice" runs once per order however many calls ask at once, and
// "charge payment" keeps a payment service that takes three calls at a time
// to three. Two instances, each with its own database pool and locker, serve
// one address behind a round robin, so the locks are what keeps them apart.
//
// Beside the calls, the schedule pack_orders fires every 10 seconds in every
// worker of both instances: each run packs the paid orders whose number
// modulo Workers is its Worker, each under the order's lock, and the program
// prints each moment's runs.
//
//	go run ./examples/shop                        # embedded SQLite, http://127.0.0.1:8080
//	go run ./examples/shop --demo                 # fire both scenarios at itself, pack the orders, print it all
//	go run ./examples/shop --demo --pack-every 2s --pack-workers 3 --orders 50
//	go run ./examples/shop --db postgres://postgres@127.0.0.1:5432/test?sslmode=disable
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/lock"
	"github.com/sqlinbox/sqlinbox/migrations"
	"github.com/sqlinbox/sqlinbox/schedule"
)

func main() {
	dbURL := flag.String("db", "sqlite://:memory:shop", "database URL: sqlite://path.db, sqlite://:memory:NAME or postgres://...")
	addr := flag.String("addr", "127.0.0.1:8080", "address to serve")
	demo := flag.Bool("demo", false, "fire three invoice calls and six charges at the shop, print the answers, wait until pack_orders packed every paid order, and exit")
	packEvery := flag.Duration("pack-every", DefaultPackEvery, "how often pack_orders fires")
	workers := flag.Int("pack-workers", 2, "pack_orders runs per instance at each moment")
	orders := flag.Int("orders", 20, "orders to seed (1..N; every fifth unpaid) for pack_orders to pack")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	packs := &countingPacker{next: slowPacker{delay: 20 * time.Millisecond}}
	moments := newMomentPrinter(os.Stdout)
	s, err := start(ctx, config{
		DB:        *dbURL,
		Invoices:  slowInvoices{delay: 500 * time.Millisecond},
		Payments:  &slowPayments{delay: time.Second},
		Packer:    packs,
		PackEvery: *packEvery,
		Workers:   *workers,
		Report:    moments.add,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: s.Handler}
	go srv.Serve(ln)
	base := "http://" + ln.Addr().String()
	// Orders are seeded once both instances are in pack_orders' membership,
	// so every moment that finds orders shares them between both.
	seed := func() {
		if err := seedOrders(ctx, s.DB, s.Dialect, 1, *orders); err != nil {
			s.Close()
			log.Fatal(err)
		}
	}
	if *demo {
		runDemo(base)
		fmt.Printf("Pack orders: %d orders, every fifth unpaid; pack_orders every %v, %d runs per instance\n", *orders, *packEvery, *workers)
		seed()
		err := awaitPacked(ctx, s, moments, packs, 3**packEvery+30*time.Second)
		srv.Shutdown(context.Background())
		if err != nil {
			s.Close()
			log.Fatal(err)
		}
		return
	}
	seed()
	log.Printf("shop: two instances on %s (database %s); pack_orders every %v; try:\n  curl -X POST %s/orders/1001/invoice\n  curl -X POST %s/orders/1001/charge", base, *dbURL, *packEvery, base, base)
	<-ctx.Done()
	srv.Shutdown(context.Background())
}

// config is what start needs: the database and the stand-ins for the
// services the shop calls, and the packing schedule's pace.
type config struct {
	DB       string
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

// shop is the two running instances.
type shop struct {
	// Handler serves both instances behind a round robin.
	Handler http.Handler
	// DB and Dialect are the first instance's pool, for seeding and checks.
	DB      *sql.DB
	Dialect *dialect.Dialect
	// Names are the instances' names, in order.
	Names []string

	closeOnce sync.Once
	closers   []func() error
}

// Close stops both instances' schedules, then their lockers and pools.
func (s *shop) Close() {
	s.closeOnce.Do(func() {
		for i := len(s.closers) - 1; i >= 0; i-- {
			s.closers[i]()
		}
	})
}

// start opens two instances of the shop over one database, each with a
// pool, a locker and a scheduler of its own, and serves them on one
// handler.
func start(ctx context.Context, cfg config) (_ *shop, err error) {
	s := &shop{Names: []string{"shop-a", "shop-b"}}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	every := cfg.PackEvery
	if every == 0 {
		every = DefaultPackEvery
	}
	var handlers []http.Handler
	for i, name := range s.Names {
		db, d, err := dialect.Open(cfg.DB)
		if err != nil {
			return nil, err
		}
		s.closers = append(s.closers, db.Close)
		if i == 0 {
			s.DB, s.Dialect = db, d
			for _, apply := range []func(context.Context, *sql.DB) error{migrations.ApplyLocks, migrations.ApplySchedules, applyOrders} {
				if err := apply(ctx, db); err != nil {
					return nil, err
				}
			}
		}
		store, err := lock.NewSQL(ctx, db, lock.SQLOptions{})
		if err != nil {
			return nil, err
		}
		s.closers = append(s.closers, store.Close)
		l, err := lock.New(store, lock.Config{Namespace: "shop"})
		if err != nil {
			return nil, err
		}
		handlers = append(handlers, (&Shop{Name: name, Locker: l, Invoices: cfg.Invoices, Payments: cfg.Payments}).Handler())

		sched, err := schedule.New(db, schedule.Config{Instance: name, Workers: cfg.Workers, Clock: cfg.Clock, Heartbeat: cfg.Heartbeat})
		if err != nil {
			return nil, err
		}
		p := newPacker(db, d, l, cfg.Packer, cfg.Report)
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

// runDemo fires both scenarios and prints each answer as it comes.
func runDemo(base string) {
	fire := func(title, path string, n int) {
		fmt.Println(title)
		start := time.Now()
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				code, body, inst, err := post(base + path)
				if err != nil {
					fmt.Printf("  %6v  error: %v\n", time.Since(start).Round(time.Millisecond), err)
					return
				}
				fmt.Printf("  %6v  %d from %s: %s\n", time.Since(start).Round(time.Millisecond), code, inst, body)
			}()
		}
		wg.Wait()
	}
	fire("Send invoice: three calls at once for order 1001", "/orders/1001/invoice", 3)
	fire("Charge payment: six calls at once, the payment service takes three", "/orders/1002/charge", 6)
}

func post(u string) (int, string, string, error) {
	resp, err := http.Post(u, "text/plain", nil)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", "", errors.Join(err)
	}
	return resp.StatusCode, strings.TrimSpace(string(b)), resp.Header.Get("X-Instance"), nil
}
