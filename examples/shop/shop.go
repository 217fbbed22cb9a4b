package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlinbox/sqlinbox/lock"
)

// InvoiceSender sends an order's invoice (a mail, a PDF, a call to an
// accounting system): it must run once per order, however many calls ask.
type InvoiceSender interface {
	Send(ctx context.Context, order string) error
}

// PaymentService charges an order; it takes three calls at a time.
type PaymentService interface {
	Charge(ctx context.Context, order string) error
}

// PaymentPlaces is how many calls the payment service takes at once.
const PaymentPlaces = 3

// ChargeWait is how long a charge waits for a place at the payment service.
const ChargeWait = 20 * time.Second

// Shop is one instance of the shop service: its own pool, its own locker.
type Shop struct {
	Name     string
	DB       *sql.DB
	SQL      Statements
	Locker   *lock.Locker
	Invoices InvoiceSender
	Payments PaymentService
}

// Handler serves the shop's two custom calls:
//
//	POST /orders/{id}/invoice   send the invoice, once per order: a call that finds another sending it is told so at once (409); a call after it was sent is told "already sent"
//	POST /orders/{id}/charge    charge the order, three at a time: the others wait up to ChargeWait for a place
//
// An id that is not a whole number is refused (400).
func (s *Shop) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders/{id}/invoice", s.sendInvoice)
	mux.HandleFunc("POST /orders/{id}/charge", s.chargePayment)
	return mux
}

// orderID reads the order's number from the path, or answers 400.
func orderID(w http.ResponseWriter, r *http.Request) (int64, bool) {
	raw := r.PathValue("id")
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || id <= 0 {
		http.Error(w, fmt.Sprintf("order id %q is not an order number: give a positive whole number, as in /orders/1001/invoice", raw), http.StatusBadRequest)
		return 0, false
	}
	return id, true
}

func (s *Shop) sendInvoice(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Instance", s.Name)
	order, ok := orderID(w, r)
	if !ok {
		return
	}
	// No wait: a second call for the same order is told at once.
	h, ok, err := s.Locker.Take(r.Context(), fmt.Sprintf("invoice:%d", order), lock.TTL(time.Minute))
	switch {
	case err != nil:
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	case !ok:
		http.Error(w, fmt.Sprintf("order %d: another call is sending its invoice", order), http.StatusConflict)
		return
	}
	defer s.Locker.Release(context.WithoutCancel(r.Context()), h.Token)
	// Under the lock, what was sent is read again: the holder before us
	// may have sent it, on this server or the other.
	var by string
	switch err := s.DB.QueryRowContext(r.Context(), s.SQL.invoiceSent, order).Scan(&by); {
	case err == nil:
		fmt.Fprintf(w, "order %d: invoice already sent by %s\n", order, by)
		return
	case !errors.Is(err, sql.ErrNoRows):
		http.Error(w, fmt.Sprintf("order %d: read shop_invoices: %v", order, err), http.StatusInternalServerError)
		return
	}
	if err := s.Invoices.Send(r.Context(), strconv.FormatInt(order, 10)); err != nil {
		http.Error(w, fmt.Sprintf("order %d: send invoice: %v", order, err), http.StatusBadGateway)
		return
	}
	// Recorded after the send: a server that dies between the two leaves
	// the invoice unrecorded, and a later call sends it again. A sender
	// that takes an idempotency key (the order) closes that gap.
	if _, err := s.DB.ExecContext(context.WithoutCancel(r.Context()), s.SQL.recordInvoice, order, s.Name); err != nil {
		http.Error(w, fmt.Sprintf("order %d: invoice sent, but not recorded in shop_invoices: %v", order, err), http.StatusInternalServerError)
		return
	}
	fmt.Fprintf(w, "order %d: invoice sent by %s (fence %d)\n", order, s.Name, h.Fence)
}

func (s *Shop) chargePayment(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Instance", s.Name)
	id, ok := orderID(w, r)
	if !ok {
		return
	}
	order := strconv.FormatInt(id, 10)
	start := time.Now()
	h, _, err := s.Locker.Take(r.Context(), "payment-service",
		lock.MaxHolders(PaymentPlaces), lock.Wait(ChargeWait), lock.TTL(time.Minute), lock.MustAcquire())
	switch {
	case errors.Is(err, lock.ErrNotAcquired):
		http.Error(w, fmt.Sprintf("order %s: the payment service stayed busy: %v", order, err), http.StatusServiceUnavailable)
		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer s.Locker.Release(context.WithoutCancel(r.Context()), h.Token)
	waited := time.Since(start)
	if err := s.Payments.Charge(r.Context(), order); err != nil {
		http.Error(w, fmt.Sprintf("order %s: charge: %v", order, err), http.StatusBadGateway)
		return
	}
	fmt.Fprintf(w, "order %s: charged by %s at place %d after waiting %v\n", order, s.Name, h.Slot, waited.Round(time.Millisecond))
}

// RoundRobin serves one address with several instances, each request going
// to the next, as a load balancer in front of them would.
func RoundRobin(instances ...http.Handler) http.Handler {
	var next atomic.Uint64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		instances[(next.Add(1)-1)%uint64(len(instances))].ServeHTTP(w, r)
	})
}

// slowInvoices stands in for a real sender: it takes a while.
type slowInvoices struct{ delay time.Duration }

func (s slowInvoices) Send(ctx context.Context, order string) error {
	select {
	case <-time.After(s.delay):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// slowPayments stands in for the payment service: it takes a while, and
// refuses a call beyond its three places, as the real one would.
type slowPayments struct {
	delay  time.Duration
	mu     sync.Mutex
	inside int
}

func (p *slowPayments) Charge(ctx context.Context, order string) error {
	p.mu.Lock()
	if p.inside >= PaymentPlaces {
		p.mu.Unlock()
		return fmt.Errorf("payment service: already %d calls at once", PaymentPlaces)
	}
	p.inside++
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.inside--
		p.mu.Unlock()
	}()
	select {
	case <-time.After(p.delay):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
