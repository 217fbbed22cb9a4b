package main

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
)

// start runs two instances, each with a pool of its own, on url.
func start(t *testing.T, url string, opts ...inbox.Option) ([]*Instance, chan Rendered) {
	t.Helper()
	done := make(chan Rendered, 100)
	dir := t.TempDir()
	var ins []*Instance
	for _, name := range []string{"a", "b"} {
		in, err := NewInstance(name, url, dir, done, opts...)
		if err != nil {
			t.Fatal(err)
		}
		ins = append(ins, in)
	}
	ctx, cancel := context.WithCancel(context.Background())
	started, stopped := Run(ctx, ins...)
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-stopped:
			if err != nil {
				t.Errorf("instances stopped with: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("instances did not stop within 30s")
		}
	})
	select {
	case <-started:
	case err := <-stopped:
		t.Fatalf("instances did not start: %v", err)
	}
	return ins, done
}

func renderedOnce(t *testing.T, url string) {
	ins, done := start(t, url)
	if err := WriteInvoices(context.Background(), ins[0].Broker.DB(), 1, 20); err != nil {
		t.Fatal(err)
	}
	by := map[int][]string{}
	for len(by) < 20 {
		select {
		case r := <-done:
			by[r.Invoice] = append(by[r.Invoice], r.Instance)
			text, err := os.ReadFile(r.Path)
			if err != nil || !strings.Contains(string(text), "Rendered by: "+r.Instance) {
				t.Fatalf("invoice file %s: %q, %v", r.Path, text, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of 20 invoices rendered within 30s", len(by))
		}
	}
	// Let both instances go idle: a second rendering would come before.
	for _, in := range ins {
		if err := in.Render.WaitIdle(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for len(done) > 0 {
		r := <-done
		by[r.Invoice] = append(by[r.Invoice], r.Instance)
	}
	for inv := 1; inv <= 20; inv++ {
		if len(by[inv]) != 1 {
			t.Fatalf("invoice %d rendered %d times: %v", inv, len(by[inv]), by[inv])
		}
	}
	var left int
	if err := ins[1].Broker.DB().QueryRow("SELECT count(*) FROM invoice_jobs").Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d rows left (%v)", left, err)
	}
}

// Two instances on one SQLite table render each of 20 invoices exactly once.
func TestTwoInstancesRenderEachInvoiceOnce(t *testing.T) {
	renderedOnce(t, inboxtest.SQLite(t))
}

// The same on Postgres.
func TestTwoInstancesRenderEachInvoiceOncePostgres(t *testing.T) {
	renderedOnce(t, inboxtest.Postgres(t))
}

// A row another program writes is seen within the quarter second of the
// poll interval.
func TestRowFromAnotherProgramSeenWithinPoll(t *testing.T) {
	url := inboxtest.SQLite(t)
	ins, done := start(t, url)
	for _, in := range ins {
		if err := in.Render.WaitIdle(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	shop := inboxtest.Open(t, url) // another program's own pool
	begin := time.Now()
	if err := WriteInvoices(context.Background(), shop, 7, 1); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		waited := time.Since(begin)
		t.Logf("invoice written by another program rendered after %v (poll interval 250ms)", waited)
		if r.Invoice != 7 || waited > 2*time.Second {
			t.Fatalf("rendered invoice %d after %v", r.Invoice, waited)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a row another program wrote was not rendered within 10s")
	}
}

// A publish through the broker reaches its own instance at once: with an
// hour's poll, only the wake can explain it.
func TestPublishReachesOwnInstanceAtOnce(t *testing.T) {
	ins, done := start(t, inboxtest.SQLite(t), inbox.PollInterval(time.Hour))
	for _, in := range ins {
		if err := in.Render.WaitIdle(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	payload, _ := json.Marshal(Invoice{Number: 42, Customer: "Ada Lovelace", Total: 9.99})
	begin := time.Now()
	if _, err := inbox.Publish(context.Background(), ins[0].Broker, Queue, RenderInvoice{Payload: payload}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		t.Logf("published invoice rendered by %s after %v (poll interval 1h)", r.Instance, time.Since(begin))
		if r.Invoice != 42 {
			t.Fatalf("rendered invoice %d", r.Invoice)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a publish was not rendered within 10s with an hour's poll")
	}
}
