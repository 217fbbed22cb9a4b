package inbox_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// An operator cancels a row in work: its handler's context ends with
// ErrCanceled, and the row is parked with the cancel as its last error,
// whatever the handler returns. docs/operating.md's "Cancelling a row" in
// code.
func ExampleOperator_Cancel() {
	ctx := context.Background()
	b, err := inbox.Open("sqlite://:memory:example_cancel")
	if err != nil {
		panic(err)
	}
	defer b.Close()
	svc := inbox.NewService("renders", "1.0.0", b)
	svc.Signals = false
	svc.OnStart(func(ctx context.Context) error { return migrations.Apply(ctx, b.DB(), "render_jobs") })
	svc.OnStart(func(ctx context.Context) error { return migrations.ApplyRegistry(ctx, b.DB()) })
	if err := svc.Register(); err != nil { // RegistryCancelPoll: 200ms where no notification comes
		panic(err)
	}
	started, stopped := make(chan int64, 1), make(chan error, 1)
	queue := inbox.MustQueue[Job]("render_jobs")
	if _, err := inbox.Handle(svc, queue, func(ctx context.Context, j Job) error {
		started <- j.ID
		<-ctx.Done() // a long render, which honours its context
		stopped <- context.Cause(ctx)
		return ctx.Err()
	}); err != nil {
		panic(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(rctx) }()
	<-svc.Started()
	if _, err := inbox.Publish(ctx, b, queue, Job{Payload: []byte(`{"page": 1}`)}); err != nil {
		panic(err)
	}
	id := <-started

	op := inbox.NewOperator(b)
	ref := inbox.QueueRef{Table: "render_jobs"}
	res, err := op.Cancel(ctx, ref, []int64{id}, inbox.CancelOptions{Reason: "customer left"})
	if err != nil {
		panic(err)
	}
	fmt.Println("in work:", res.InWork)
	cause := <-stopped
	var cc *inbox.CancelCause
	fmt.Println(errors.Is(cause, inbox.ErrCanceled), errors.As(cause, &cc) && cc.Reason == "customer left")
	cancel() // the stop waits for the row's settlement
	if err := <-done; err != nil {
		panic(err)
	}
	rows, err := op.Rows(ctx, ref, inbox.RowFilter{IDs: []int64{id}})
	if err != nil {
		panic(err)
	}
	fmt.Println(rows[0].State, "-", rows[0].LastError)
	// Output:
	// in work: 1
	// true true
	// parked - inbox: canceled by an operator: customer left
}
