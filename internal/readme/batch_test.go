package readme_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// ImportJob is a row of import_jobs, the reference table.
type ImportJob struct {
	ID          int64      `db:"id" inbox:"id,generated"`
	LockedUntil *time.Time `db:"locked_until" inbox:"locked_until"`
	Payload     []byte     `db:"payload" inbox:"payload"`
	Queue       string     `db:"group_name" inbox:"group"`
}

// docs/workflows.md, "Batches": the import's rows and its summary, in the
// groups "import" and "summary" of one table.
var (
	imports   = inbox.MustQueue[ImportJob]("import_jobs").Group("import")
	summaries = imports.Group("summary")
)

// docs/workflows.md, "Batches".
func importLines(ctx context.Context, b *inbox.Broker, lines []string) (inbox.Batch, error) {
	rows := make([]ImportJob, len(lines))
	for i, line := range lines {
		rows[i].Payload = []byte(line)
	}
	// One transaction: the rows, the summary, and its wait for every row.
	return inbox.PublishBatch(ctx, b, imports, rows, summaries, ImportJob{Payload: []byte("import 7")})
}

// docs/workflows.md, "Batches": the summary's handler.
func summarize(ctx context.Context, job ImportJob) error {
	p, _ := inbox.ParentsFrom(ctx) // how the batch's rows ended
	return sendSummary(ctx, fmt.Sprintf("%s: %d imported, %d parked", job.Payload, p.Acked, p.Parked))
}

var summariesSent = make(chan string, 4)

func sendSummary(_ context.Context, text string) error { summariesSent <- text; return nil }

func TestBatchSample(t *testing.T) {
	ctx := context.Background()
	url := inboxtest.SQLite(t)
	b := inboxtest.NewBroker(t, url)
	if err := migrations.Apply(ctx, b.DB(), "import_jobs"); err != nil {
		t.Fatal(err)
	}
	if err := migrations.ApplyDependencies(ctx, b.DB(), "import_jobs", "id"); err != nil {
		t.Fatal(err)
	}
	batch, err := importLines(ctx, b, []string{"ada", "", "ken"})
	if err != nil || len(batch.Rows) != 3 {
		t.Fatalf("batch %+v, %v", batch, err)
	}
	svc := inbox.NewService("importer", "test", b)
	if _, err := inbox.Handle(svc, imports, func(ctx context.Context, j ImportJob) error {
		if len(j.Payload) == 0 {
			return inbox.Park(fmt.Errorf("empty line"))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := inbox.Handle(svc, summaries, summarize); err != nil {
		t.Fatal(err)
	}
	inboxtest.Start(t, svc)
	select {
	case got := <-summariesSent:
		if got != "import 7: 2 imported, 1 parked" {
			t.Fatalf("summary %q", got)
		}
	case <-time.After(inboxtest.Timeout):
		t.Fatal("no summary")
	}
}
