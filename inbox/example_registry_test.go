package inbox_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// A registered service, a queue paused and resumed, and the state an
// operator reads: docs/operating.md's "Registering a service" in code.
func ExampleService_Register() {
	ctx := context.Background()
	b, err := inbox.Open("sqlite://:memory:example_register", inbox.PollInterval(50*time.Millisecond))
	if err != nil {
		panic(err)
	}
	defer b.Close()
	svc := inbox.NewService("invoices", "1.4.0", b)
	svc.Signals = false
	svc.OnStart(func(ctx context.Context) error { return migrations.Apply(ctx, b.DB(), "invoice_jobs") })
	svc.OnStart(func(ctx context.Context) error { return migrations.ApplyRegistry(ctx, b.DB()) })
	if err := svc.Register(); err != nil { // options: RegistryHeartbeat (the poll interval), RegistryKeep (24h)
		panic(err)
	}
	handled := make(chan int64, 10)
	queue := inbox.MustQueue[Job]("invoice_jobs")
	if _, err := inbox.Handle(svc, queue, func(ctx context.Context, j Job) error { handled <- j.ID; return nil }, inbox.Workers(2)); err != nil {
		panic(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(rctx) }()
	<-svc.Started()

	op := inbox.NewOperator(b)
	if err := op.Pause(ctx, "invoice_jobs", ""); err != nil {
		panic(err)
	}
	for deadline := time.Now().Add(30 * time.Second); !svc.Paused("invoice_jobs", ""); {
		if time.Now().After(deadline) {
			panic("the pause was not seen within 30s")
		}
		time.Sleep(time.Millisecond) // a pause is seen within a heartbeat
	}
	for range 3 {
		if _, err := inbox.Publish(ctx, b, queue, Job{Payload: []byte(`{"invoice": 1}`)}); err != nil {
			panic(err)
		}
	}
	qs, err := op.Queues(ctx)
	if err != nil {
		panic(err)
	}
	for _, q := range qs {
		fmt.Printf("%s: %d available, %d instance(s), paused %t\n", q.Table, q.State.Available, q.Instances, q.Paused)
	}
	if err := op.Resume(ctx, "invoice_jobs", ""); err != nil {
		panic(err)
	}
	for range 3 {
		<-handled
	}
	fmt.Println("3 handled after resume")
	cancel()
	if err := <-done; err != nil {
		panic(err)
	}
	insts, _ := op.Instances(ctx)
	fmt.Println(len(insts), "instances after stop")
	// Output:
	// invoice_jobs: 3 available, 1 instance(s), paused true
	// 3 handled after resume
	// 0 instances after stop
}
