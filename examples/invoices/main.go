// Command invoices is the invoice-rendering service of the guide: two
// instances of it share one invoice_jobs table, a shop writes 20 invoices
// with plain SQL, and each invoice is rendered exactly once, by one of them.
//
//	go run ./examples/invoices                           # embedded SQLite file in a temp dir
//	go run ./examples/invoices --db postgres://postgres@127.0.0.1:5432/test?sslmode=disable
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"syscall"
	"time"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "invoices:", err)
		os.Exit(1)
	}
}

func run() error {
	dbURL := flag.String("db", "", "database URL (postgres://... or sqlite://...); default: a SQLite file in a temp dir")
	count := flag.Int("invoices", 20, "how many invoices the shop writes")
	flag.Parse()

	outDir, err := os.MkdirTemp("", "invoices-")
	if err != nil {
		return err
	}
	url := *dbURL
	if url == "" {
		url = "sqlite://" + filepath.Join(outDir, "invoices.db")
	}
	fmt.Printf("database: %s\nrendering into: %s\n", url, outDir)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	done := make(chan Rendered, *count)
	var instances []*Instance
	for _, name := range []string{"instance-a", "instance-b"} {
		in, err := NewInstance(name, url, outDir, done)
		if err != nil {
			return err
		}
		instances = append(instances, in)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	started, stopped := Run(runCtx, instances...)
	select {
	case <-started:
	case err := <-stopped:
		return fmt.Errorf("an instance did not start: %w", err)
	}

	// A fresh run on a database that keeps rows (Postgres) starts clean.
	shop := instances[0].Broker.DB()
	if _, err := shop.ExecContext(ctx, "DELETE FROM invoice_jobs"); err != nil {
		return err
	}
	start := time.Now()
	if err := WriteInvoices(ctx, shop, 1, *count); err != nil {
		return err
	}
	fmt.Printf("the shop wrote %d invoices with plain SQL\n", *count)

	byInvoice := map[int][]string{}
	perInstance := map[string]int{}
	timeout := time.After(60 * time.Second)
	for len(byInvoice) < *count {
		select {
		case r := <-done:
			byInvoice[r.Invoice] = append(byInvoice[r.Invoice], r.Instance)
			perInstance[r.Instance]++
			fmt.Printf("invoice %2d rendered by %s: %s\n", r.Invoice, r.Instance, r.Path)
		case <-timeout:
			return fmt.Errorf("only %d of %d invoices rendered within 60s", len(byInvoice), *count)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	elapsed := time.Since(start)
	cancel()
	if err := <-stopped; err != nil {
		return err
	}
	// Anything rendered twice would have arrived by now.
	for len(done) > 0 {
		r := <-done
		byInvoice[r.Invoice] = append(byInvoice[r.Invoice], r.Instance)
	}
	names := make([]string, 0, len(perInstance))
	for n := range perInstance {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Printf("%s rendered %d invoices\n", n, perInstance[n])
	}
	for inv, by := range byInvoice {
		if len(by) != 1 {
			return fmt.Errorf("invoice %d was rendered %d times (by %v)", inv, len(by), by)
		}
	}
	fmt.Printf("all %d invoices rendered once, in %v\n", *count, elapsed.Round(time.Millisecond))
	return nil
}
