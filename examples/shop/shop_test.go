package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inboxtest"
)

// gatedInvoices blocks every send until the test opens the gate.
type gatedInvoices struct {
	entered chan string
	gate    chan struct{}
}

func (g *gatedInvoices) Send(ctx context.Context, order string) error {
	g.entered <- order
	<-g.gate
	return nil
}

// gatedPayments counts the calls inside and lets each one out when the test
// says; it fails a call beyond its three places, as the real one would.
type gatedPayments struct {
	mu      sync.Mutex
	inside  int
	most    int
	entered chan chan struct{} // each call hands the test its way out
}

func (p *gatedPayments) Charge(ctx context.Context, order string) error {
	p.mu.Lock()
	p.inside++
	p.most = max(p.most, p.inside)
	over := p.inside > PaymentPlaces
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.inside--
		p.mu.Unlock()
	}()
	if over {
		return fmt.Errorf("payment service: more than %d calls at once", PaymentPlaces)
	}
	out := make(chan struct{})
	p.entered <- out
	<-out
	return nil
}

type answer struct {
	code     int
	body     string
	instance string
	at       time.Time
}

func fire(t *testing.T, u string, n int) chan answer {
	answers := make(chan answer, n)
	for range n {
		go func() {
			code, body, inst, err := post(u)
			if err != nil {
				t.Error(err)
			}
			answers <- answer{code, body, inst, time.Now()}
		}()
	}
	return answers
}

func recv[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(15 * time.Second):
		t.Fatalf("no %s within 15s", what)
	}
	var zero T
	return zero
}

// eachDatabase runs f on a fresh SQLite memory database and, with
// POSTGRES_TEST_URL, on a Postgres schema of its own.
func eachDatabase(t *testing.T, f func(t *testing.T, dbURL string)) {
	t.Run("sqlite", func(t *testing.T) { f(t, inboxtest.SQLite(t)) })
	t.Run("postgres", func(t *testing.T) { f(t, inboxtest.Postgres(t)) })
}

func TestShop(t *testing.T) {
	eachDatabase(t, func(t *testing.T, dbURL string) {
		inv := &gatedInvoices{entered: make(chan string, 10), gate: make(chan struct{})}
		pay := &gatedPayments{entered: make(chan chan struct{}, 6)}
		s, err := start(context.Background(), config{
			DB: dbURL, Invoices: inv, Payments: pay, Packer: packFunc(nil), Workers: 1,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		srv := httptest.NewServer(s.Handler)
		t.Cleanup(srv.Close)
		t.Run("SendInvoice", func(t *testing.T) { testSendInvoice(t, srv.URL, inv) })
		t.Run("ChargePayment", func(t *testing.T) { testChargePayment(t, srv.URL, pay) })
		t.Run("BadOrderID", func(t *testing.T) { testBadOrderID(t, srv.URL) })
	})
}

// Three calls at once for one order: one sends; the other two are told at
// once, while the first is still sending, that another call is sending it.
func testSendInvoice(t *testing.T, base string, inv *gatedInvoices) {
	answers := fire(t, base+"/orders/1001/invoice", 3)
	if order := recv(t, inv.entered, "send"); order != "1001" {
		t.Fatalf("sent the invoice of order %q", order)
	}
	instances := map[string]bool{}
	for range 2 { // the sender is still blocked: these answers came at once
		a := recv(t, answers, "answer to a second call")
		if a.code != http.StatusConflict || !strings.Contains(a.body, "another call is sending its invoice") {
			t.Fatalf("second call: %d %q, want 409 naming the other call", a.code, a.body)
		}
		instances[a.instance] = true
	}
	close(inv.gate)
	a := recv(t, answers, "answer of the sending call")
	if a.code != http.StatusOK || !strings.Contains(a.body, "invoice sent") {
		t.Fatalf("sending call: %d %q", a.code, a.body)
	}
	instances[a.instance] = true
	if len(instances) != 2 {
		t.Errorf("answers came from %v: both instances should have served", instances)
	}
	select {
	case o := <-inv.entered:
		t.Fatalf("the invoice of order %s was sent twice", o)
	default:
	}
	// Once sent, later calls, on either server, are told it was: the
	// invoice is sent once per order.
	for i := range 2 {
		a := recv(t, fire(t, base+"/orders/1001/invoice", 1), "later call")
		if a.code != http.StatusOK || !strings.Contains(a.body, "order 1001: invoice already sent by ") {
			t.Fatalf("later call %d: %d %q, want 200 saying it was already sent", i, a.code, a.body)
		}
	}
	select {
	case o := <-inv.entered:
		t.Fatalf("a later call sent the invoice of order %s again", o)
	default:
	}
	// Another order is sent on its own.
	other := fire(t, base+"/orders/1003/invoice", 1)
	if o := recv(t, inv.entered, "send of order 1003"); o != "1003" {
		t.Fatalf("sent the invoice of order %q", o)
	}
	if a := recv(t, other, "answer for order 1003"); a.code != http.StatusOK || !strings.Contains(a.body, "invoice sent by") {
		t.Fatalf("order 1003: %d %q", a.code, a.body)
	}
}

// An order id that is not a positive whole number is refused with a 400
// that says so, on both calls, before any lock or service is touched.
func testBadOrderID(t *testing.T, base string) {
	for _, path := range []string{"/orders/abc/invoice", "/orders/12x/charge", "/orders/-4/invoice", "/orders/1.5/charge"} {
		a := recv(t, fire(t, base+path, 1), "answer to "+path)
		if a.code != http.StatusBadRequest || !strings.Contains(a.body, "is not an order number") {
			t.Errorf("POST %s: %d %q, want 400 saying the id is not an order number", path, a.code, a.body)
		}
	}
}

// Six calls at once against a payment service that takes three: three hold,
// three wait, and each takes the place a payment gives back at once.
func testChargePayment(t *testing.T, base string, pay *gatedPayments) {
	answers := fire(t, base+"/orders/1002/charge", 6)
	var outs []chan struct{}
	for range 3 {
		outs = append(outs, recv(t, pay.entered, "charge"))
	}
	pay.mu.Lock()
	inside := pay.inside
	pay.mu.Unlock()
	if inside != 3 {
		t.Fatalf("%d charges inside the payment service, want 3", inside)
	}
	select {
	case a := <-answers:
		t.Fatalf("a call answered while it should wait: %d %q", a.code, a.body)
	default:
	}
	var handover []time.Duration
	for len(outs) > 0 {
		out := outs[0]
		outs = outs[1:]
		at := time.Now()
		close(out)
		if len(handover) < 3 {
			outs = append(outs, recv(t, pay.entered, "charge in a freed place"))
			handover = append(handover, time.Since(at))
		}
		if a := recv(t, answers, "answer of a charge"); a.code != http.StatusOK || !strings.Contains(a.body, "charged") {
			t.Fatalf("charge: %d %q", a.code, a.body)
		}
	}
	t.Logf("freed place to the next charge: %v", handover)
	for _, d := range handover {
		if d > 5*time.Second {
			t.Errorf("a waiting charge took %v to take a freed place", d)
		}
	}
	pay.mu.Lock()
	defer pay.mu.Unlock()
	if pay.most != PaymentPlaces {
		t.Errorf("at most %d charges at once, want %d", pay.most, PaymentPlaces)
	}
}
