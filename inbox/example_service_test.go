package inbox_test

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// A service handling one queue until its context ends: the table made at
// start, three rows published, and Run returning nil once the context is
// cancelled and its handlers have returned.
func ExampleService() {
	ctx := context.Background()
	b, err := inbox.Open("sqlite://:memory:")
	if err != nil {
		panic(err)
	}
	defer b.Close()

	svc := inbox.NewService("invoices", "1.0.0", b)
	svc.Signals = false // stop on the context only, not on SIGINT or SIGTERM
	svc.OnStart(func(ctx context.Context) error { return migrations.Apply(ctx, b.DB(), "invoice_jobs") })

	queue := inbox.MustQueue[Job]("invoice_jobs")
	var mu sync.Mutex
	var seen []string
	handled := make(chan struct{}, 3)
	render := func(ctx context.Context, j Job) error {
		mu.Lock()
		seen = append(seen, string(j.Payload))
		mu.Unlock()
		handled <- struct{}{}
		return nil // acknowledged: the row is deleted
	}
	if _, err := inbox.Handle(svc, queue, render, inbox.Workers(2)); err != nil {
		panic(err)
	}

	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(rctx) }()
	<-svc.Started() // the table exists once the start hooks have run

	for _, p := range []string{`{"invoice": 1}`, `{"invoice": 2}`, `{"invoice": 3}`} {
		if _, err := inbox.Publish(ctx, b, queue, Job{Payload: []byte(p)}); err != nil {
			panic(err)
		}
	}
	for range 3 {
		<-handled
	}
	stop()
	if err := <-done; err != nil {
		panic(err)
	}

	slices.Sort(seen) // two workers: handled in any order
	for _, p := range seen {
		fmt.Println("rendered", p)
	}
	n, err := inbox.Count(ctx, b, queue)
	if err != nil {
		panic(err)
	}
	fmt.Println("rows left:", n.Available+n.Held+n.Parked)
	// Output:
	// rendered {"invoice": 1}
	// rendered {"invoice": 2}
	// rendered {"invoice": 3}
	// rows left: 0
}
