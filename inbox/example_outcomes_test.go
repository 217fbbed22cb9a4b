package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// A handler choosing its row's outcome: a passing failure asks for a retry
// after a delay of its choosing (inbox.RetryAfter), input that will never
// succeed is parked at once (inbox.Park), and the parked row is read back
// with inbox.ListParked, its attempts and last error with it.
func ExampleRetryAfter() {
	ctx := context.Background()
	b, err := inbox.Open("sqlite://:memory:", inbox.PollInterval(10*time.Millisecond))
	if err != nil {
		panic(err)
	}
	defer b.Close()
	if err := migrations.Apply(ctx, b.DB(), "invoice_jobs"); err != nil {
		panic(err)
	}
	queue := inbox.MustQueue[Job]("invoice_jobs")
	for _, p := range []string{"flaky", "malformed"} {
		if _, err := inbox.Publish(ctx, b, queue, Job{Payload: []byte(p)}); err != nil {
			panic(err)
		}
	}

	var mu sync.Mutex
	tries := map[string]int{}
	handle := func(ctx context.Context, j Job) error {
		mu.Lock()
		defer mu.Unlock()
		p := string(j.Payload)
		tries[p]++
		switch {
		case p == "malformed":
			return inbox.Park(errors.New("cannot decode the payload"))
		case tries[p] == 1:
			return inbox.RetryAfter(20*time.Millisecond, errors.New("mail server busy"))
		}
		return nil
	}
	outcomes := map[int64][]inbox.Outcome{} // by row id
	settled := make(chan inbox.Event, 10)
	observe := func(e inbox.Event) {
		mu.Lock()
		outcomes[e.ID] = append(outcomes[e.ID], e.Outcome)
		mu.Unlock()
		settled <- e
	}
	sub, err := inbox.Subscribe(b, queue, handle, inbox.Observe(observe))
	if err != nil {
		panic(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- sub.Run(rctx) }()
	for finished := 0; finished < 2; {
		if e := <-settled; e.Outcome == inbox.Acked || e.Outcome == inbox.Parked {
			finished++
		}
	}
	stop()
	if err := <-done; err != nil {
		panic(err)
	}

	for _, id := range []int64{1, 2} {
		fmt.Println("row", id, outcomes[id])
	}
	parked, err := inbox.ListParked(ctx, b, queue)
	if err != nil {
		panic(err)
	}
	for _, j := range parked {
		fmt.Printf("parked: row %d %q after %d attempt(s): %s\n", j.ID, j.Payload, j.Attempts, j.LastError.String)
	}
	// Output:
	// row 1 [retried acked]
	// row 2 [parked]
	// parked: row 2 "malformed" after 1 attempt(s): parked by its handler: cannot decode the payload
}
