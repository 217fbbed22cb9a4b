package inboxotel_test

import (
	"context"
	"testing"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxotel"
	"github.com/sqlinbox/sqlinbox/inboxtest"
)

func render(context.Context, job) error { return nil }

// docs/operating.md, "Metrics and traces", on the global providers.
func instrumented(b *inbox.Broker, queue inbox.Queue[job]) (*inbox.Service, error) {
	svc := inbox.NewService("invoices", "1.4.0", b)
	_, _ = inbox.Handle(svc, queue, render, inbox.Workers(8))
	if err := inboxotel.Instrument(svc); err != nil { // the global providers
		return nil, err
	}
	return svc, nil
}

func TestReadmeSample(t *testing.T) {
	b := inboxtest.NewBroker(t, inboxtest.SQLite(t))
	if _, err := instrumented(b, inbox.MustQueue[job]("jobs")); err != nil {
		t.Fatalf("the operating guide's sample: %v", err)
	}
}
