// Command example runs a small invoice service instrumented with inboxotel
// and serves its metrics to Prometheus: a module of its own, so neither
// OpenTelemetry nor the Prometheus client reaches the library's importers.
//
//	cd inboxotel/example && go run . --metrics 127.0.0.1:9464
//	curl -s 127.0.0.1:9464/metrics | grep inbox_
//
// It publishes --invoices rows to an embedded SQLite file (or --db), renders
// them with four workers (every seventh fails its first attempt), prints the
// handlings, and with --metrics keeps serving /metrics after the run until
// interrupted.
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
	"path/filepath"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxotel"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// RenderInvoice is the reference table's row.
type RenderInvoice struct {
	ID          int64          `db:"id" inbox:"id,generated"`
	LockedUntil *time.Time     `db:"locked_until" inbox:"locked_until"`
	Payload     []byte         `db:"payload" inbox:"payload"`
	Attempts    int            `db:"attempts" inbox:"attempts"`
	LastError   sql.NullString `db:"last_error" inbox:"last_error"`
	CreatedAt   time.Time      `db:"created_at" inbox:"created_at"`
}

func main() {
	db := flag.String("db", "sqlite://"+filepath.Join(os.TempDir(), "sqlinbox-metrics.db"), "database URL")
	metrics := flag.String("metrics", "", "serve /metrics on this address (e.g. 127.0.0.1:9464) and keep serving after the run")
	invoices := flag.Int("invoices", 50, "invoices to render")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *db, *metrics, *invoices, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// run renders n invoices; with addr it serves /metrics from the start and
// until ctx ends.
func run(ctx context.Context, url, addr string, n int, out *os.File) error {
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return err
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer provider.Shutdown(context.Background())
	if addr != "" {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		fmt.Fprintf(out, "serving metrics on http://%s/metrics\n", ln.Addr())
	}

	b, err := inbox.Open(url, inbox.PollInterval(100*time.Millisecond))
	if err != nil {
		return err
	}
	defer b.Close()
	if err := migrations.Apply(ctx, b.DB(), "metrics_invoices"); err != nil {
		return err
	}
	queue := inbox.MustQueue[RenderInvoice]("metrics_invoices")
	svc := inbox.NewService("invoices", "1.0.0", b)
	svc.Signals = false
	done := make(chan struct{}, n)
	render := func(ctx context.Context, inv RenderInvoice) error {
		time.Sleep(5 * time.Millisecond)
		if inv.ID%7 == 0 && inv.Attempts <= 1 {
			return inbox.RetryAfter(50*time.Millisecond, errors.New("printer busy"))
		}
		done <- struct{}{}
		return nil
	}
	if _, err := inbox.Handle(svc, queue, render, inbox.Workers(4)); err != nil {
		return err
	}
	if err := inboxotel.Instrument(svc, inboxotel.WithMeterProvider(provider)); err != nil {
		return err
	}
	for i := range n {
		if _, err := inbox.Publish(ctx, b, queue, RenderInvoice{Payload: fmt.Appendf(nil, `{"invoice": %d}`, i+1)}); err != nil {
			return err
		}
	}
	rctx, cancel := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- svc.Run(rctx) }()
	for range n {
		select {
		case <-done:
		case <-ctx.Done():
			cancel()
			return <-stopped
		}
	}
	fmt.Fprintf(out, "rendered %d invoices\n", n)
	if addr != "" {
		fmt.Fprintln(out, "serving metrics until interrupted")
		<-ctx.Done()
	}
	cancel()
	return <-stopped
}
