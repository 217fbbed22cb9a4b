package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// Import rows, then send one summary once every row is done: the summary
// is the batch's callback, a row of the group "summary" of the same table,
// claimable once each imported row was acked or parked. Its handler reads
// how many were which with ParentsFrom.
func ExamplePublishBatch() {
	ctx := context.Background()
	b, err := inbox.Open("sqlite://:memory:")
	if err != nil {
		panic(err)
	}
	defer b.Close()
	if err := migrations.Apply(ctx, b.DB(), "import_jobs"); err != nil {
		panic(err)
	}
	// The edges that let the callback wait for the batch's rows.
	if err := migrations.ApplyDependencies(ctx, b.DB(), "import_jobs", "id"); err != nil {
		panic(err)
	}
	imports := inbox.MustQueue[Job]("import_jobs").Group("import")
	summaries := imports.Group("summary")

	var rows []Job
	for _, line := range []string{"ada", "grace", "", "linus", "ken"} {
		rows = append(rows, Job{Payload: []byte(line)})
	}
	batch, err := inbox.PublishBatch(ctx, b, imports, rows, summaries, Job{Payload: []byte("import 7")})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%d rows, callback waits for them\n", len(batch.Rows))

	importer, err := inbox.Subscribe(b, imports, func(ctx context.Context, j Job) error {
		if len(j.Payload) == 0 {
			return inbox.Park(errors.New("empty line"))
		}
		return nil
	})
	if err != nil {
		panic(err)
	}
	summarized := make(chan string, 1)
	summarizer, err := inbox.Subscribe(b, summaries, func(ctx context.Context, j Job) error {
		p, _ := inbox.ParentsFrom(ctx)
		summarized <- fmt.Sprintf("%s: %d imported, %d parked", j.Payload, p.Acked, p.Parked)
		return nil
	})
	if err != nil {
		panic(err)
	}
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, s := range []*inbox.Subscription{importer, summarizer} {
		wg.Go(func() {
			if err := s.Run(rctx); err != nil {
				panic(err)
			}
		})
	}
	fmt.Println(strings.TrimSpace(<-summarized))
	stop()
	wg.Wait()
	// Output:
	// 5 rows, callback waits for them
	// import 7: 4 imported, 1 parked
}
