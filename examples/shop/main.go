// Command shop is the two custom calls of a shop, kept in order by locks:
// "send invoice" runs once per order however many calls ask at once, and
// "charge payment" keeps a payment service that takes three calls at a time
// to three. Two instances, each with its own database pool and locker, serve
// one address behind a round robin, so the locks are what keeps them apart.
//
//	go run ./examples/shop                        # embedded SQLite, http://127.0.0.1:8080
//	go run ./examples/shop --demo                 # fire both scenarios at itself and print the answers
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

	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/lock"
	"github.com/sqlinbox/sqlinbox/migrations"
)

func main() {
	dbURL := flag.String("db", "sqlite://:memory:shop", "database URL: sqlite://path.db, sqlite://:memory:NAME or postgres://...")
	addr := flag.String("addr", "127.0.0.1:8080", "address to serve")
	demo := flag.Bool("demo", false, "fire three invoice calls and six charges at the shop, print the answers, and exit")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	front, closeAll, err := start(ctx, *dbURL, slowInvoices{delay: 500 * time.Millisecond}, &slowPayments{delay: time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer closeAll()

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: front}
	go srv.Serve(ln)
	base := "http://" + ln.Addr().String()
	if *demo {
		runDemo(base)
		srv.Shutdown(context.Background())
		return
	}
	log.Printf("shop: two instances on %s (database %s); try:\n  curl -X POST %s/orders/1001/invoice\n  curl -X POST %s/orders/1001/charge", base, *dbURL, base, base)
	<-ctx.Done()
	srv.Shutdown(context.Background())
}

// start opens two instances of the shop over one database, each with a
// pool and a locker of its own, and serves them on one handler.
func start(ctx context.Context, dbURL string, inv InvoiceSender, pay PaymentService) (http.Handler, func(), error) {
	var closers []func() error
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	var handlers []http.Handler
	for i, name := range []string{"shop-a", "shop-b"} {
		db, _, err := dialect.Open(dbURL)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		closers = append(closers, db.Close)
		if i == 0 {
			if err := migrations.ApplyLocks(ctx, db); err != nil {
				closeAll()
				return nil, nil, err
			}
		}
		s, err := newStore(ctx, db)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		closers = append(closers, s.Close)
		l, err := lock.New(s, lock.Config{Namespace: "shop"})
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		handlers = append(handlers, (&Shop{Name: name, Locker: l, Invoices: inv, Payments: pay}).Handler())
	}
	return RoundRobin(handlers...), closeAll, nil
}

func newStore(ctx context.Context, db *sql.DB) (*lock.SQL, error) {
	return lock.NewSQL(ctx, db, lock.SQLOptions{})
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
