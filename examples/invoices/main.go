// Command invoices is the invoice-rendering service of the guide: two
// instances of it share one invoice_jobs table, a shop writes 20 invoices
// with plain SQL, and each invoice is rendered exactly once, by one of them,
// then sent by a transactional handler that records it sent once.
// A run writes its invoices under a group of its own and handles only those:
// other rows of the table, on a database you point it at, are left alone.
//
//	go run ./examples/invoices                           # embedded SQLite file in a temp dir
//	go run ./examples/invoices --db postgres://postgres@127.0.0.1:5432/test?sslmode=disable
//
// The instances register themselves, so the inbox command on the same
// database shows the queues and both instances while they run; --stay keeps
// them running after the demo, until interrupted:
//
//	go run ./examples/invoices --db sqlite:///tmp/invoices.db --stay
//	go run ./cmd/inbox dashboard --db sqlite:///tmp/invoices.db
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"syscall"
	"time"
)

func main() {
	dbURL := flag.String("db", "", "database URL (postgres://..., mysql://... or sqlite://...); default: a SQLite file in a temp dir")
	count := flag.Int("invoices", 20, "how many invoices the shop writes")
	stay := flag.Bool("stay", false, "keep both instances running after the demo, until interrupted (to watch them with inbox queues or inbox dashboard)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := demo(ctx, *dbURL, *count, *stay, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "invoices:", err)
		os.Exit(1)
	}
}

// demo runs two instances on url (a SQLite file in a temp dir when empty),
// writes count invoices of a group of its own, and returns how many each
// instance rendered once all are rendered, each once, and sent, each
// recorded once (with stay, once ctx ends after that).
func demo(ctx context.Context, url string, count int, stay bool, out io.Writer) (map[string]int, error) {
	outDir, err := os.MkdirTemp("", "invoices-")
	if err != nil {
		return nil, err
	}
	if url == "" {
		url = "sqlite://" + filepath.Join(outDir, "invoices.db")
	}
	var tag [4]byte
	_, _ = rand.Read(tag[:])
	group := "demo-" + hex.EncodeToString(tag[:])
	fmt.Fprintf(out, "database: %s\nrendering into: %s\ngroup of this run: %s\n", url, outDir, group)
	fmt.Fprintf(out, "watch the queues: go run ./cmd/inbox dashboard --db %s\n", url)

	done := make(chan Rendered, count)
	var instances []*Instance
	for _, name := range []string{"instance-a", "instance-b"} {
		in, err := NewInstance(name, url, Queue.Group(group), outDir, done)
		if err != nil {
			return nil, err
		}
		instances = append(instances, in)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	started, stopped := Run(runCtx, instances...)
	select {
	case <-started:
	case err := <-stopped:
		return nil, fmt.Errorf("an instance did not start: %w", err)
	}

	shop := instances[0].Broker.DB()
	start := time.Now()
	if err := WriteInvoices(ctx, shop, group, 1, count); err != nil {
		return nil, err
	}
	// Rows written by plain SQL wake nobody (the poll finds them): a
	// producer in the same process wakes the group's subscriptions of every
	// broker of the process at once.
	instances[0].Broker.Wake(Table, group)
	fmt.Fprintf(out, "the shop wrote %d invoices with plain SQL\n", count)

	byInvoice := map[int][]string{}
	perInstance := map[string]int{}
	timeout := time.After(60 * time.Second)
	for len(byInvoice) < count {
		select {
		case r := <-done:
			byInvoice[r.Invoice] = append(byInvoice[r.Invoice], r.Instance)
			perInstance[r.Instance]++
			fmt.Fprintf(out, "invoice %2d rendered by %s: %s\n", r.Invoice, r.Instance, r.Path)
		case <-timeout:
			return nil, fmt.Errorf("only %d of %d invoices rendered within 60s", len(byInvoice), count)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	// Each rendered invoice is sent by a transactional handler, which
	// records it in invoices_sent as it acks: wait for every record.
	var sent map[string]int
	for {
		if sent, err = SentCounts(ctx, shop, group); err != nil {
			return nil, err
		}
		if len(sent) == count {
			break
		}
		select {
		case <-timeout:
			return nil, fmt.Errorf("only %d of %d invoices recorded sent within 60s", len(sent), count)
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	elapsed := time.Since(start)
	if stay {
		fmt.Fprintln(out, "all invoices sent; the instances keep running until interrupted (Ctrl-C)")
		<-ctx.Done()
	}
	cancel()
	if err := <-stopped; err != nil {
		return nil, err
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
		fmt.Fprintf(out, "%s rendered %d invoices\n", n, perInstance[n])
	}
	for inv, by := range byInvoice {
		if len(by) != 1 {
			return nil, fmt.Errorf("invoice %d was rendered %d times (by %v)", inv, len(by), by)
		}
	}
	for k, n := range sent {
		if n != 1 {
			return nil, fmt.Errorf("%s was recorded sent %d times", k, n)
		}
	}
	fmt.Fprintf(out, "all %d invoices rendered once and sent once (%d records in %s), in %v\n", count, len(sent), SentTable, elapsed.Round(time.Millisecond))
	return perInstance, nil
}
