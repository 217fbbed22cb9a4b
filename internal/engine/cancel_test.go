package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/internal/claim/contract"
	"github.com/sqlinbox/sqlinbox/internal/inboxtype"
)

// recordSettler tells got how its row was settled.
type recordSettler struct {
	contract.Settler
	got chan string
}

func (s recordSettler) Ack(context.Context) error { s.got <- "ack"; return nil }
func (s recordSettler) Park(_ context.Context, lastError string) error {
	s.got <- "park: " + lastError
	return nil
}
func (s recordSettler) Retry(context.Context, time.Duration, string) error {
	s.got <- "retry"
	return nil
}

// Cancel ends the context of the handler of its row alone, and the row is
// parked with the cancel as its last error (or deleted, as the cancel
// asks) whatever the handler returned: never acked, never retried.
func TestCancelSettlesAsTheCancelAsks(t *testing.T) {
	for _, c := range []struct {
		name  string
		cause *inboxtype.CancelCause
		ret   error
		want  string
	}{
		{"handler returns nil", &inboxtype.CancelCause{Reason: "customer left"}, nil, "park: inbox: canceled by an operator: customer left"},
		{"handler returns its error", &inboxtype.CancelCause{}, errors.New("render: stopped"), "park: inbox: canceled by an operator (the handler returned: render: stopped)"},
		{"handler returns the context's error", &inboxtype.CancelCause{}, context.Canceled, "park: inbox: canceled by an operator"},
		{"delete", &inboxtype.CancelCause{Delete: true}, nil, "ack"},
	} {
		t.Run(c.name, func(t *testing.T) {
			started := make(chan struct{})
			e := testEngine(clock.Host{}, opts{}, func(ctx context.Context, _ *contract.Job) error {
				close(started)
				<-ctx.Done()
				return c.ret
			})
			got := make(chan string, 1)
			j := &contract.Job{ID: 7, Settler: recordSettler{got: got}}
			if e.Running() {
				t.Fatal("Running before any handler started")
			}
			result := make(chan handling, 1)
			go func() { result <- e.work(context.Background(), e.newWatch(), j, time.Now()) }()
			<-started
			if !e.Running() {
				t.Fatal("not Running while a handler runs")
			}
			if e.Cancel(8, c.cause) {
				t.Fatal("Cancel of row 8 found a handler; only row 7 runs")
			}
			if !e.Cancel(7, c.cause) {
				t.Fatal("Cancel of row 7 found no handler")
			}
			h := <-result
			outcome, err := e.settle(context.Background(), &h, h.err, h.lost)
			if err != nil || outcome != inboxtype.Canceled {
				t.Fatalf("settled %v, %v; want Canceled", outcome, err)
			}
			if s := <-got; s != c.want {
				t.Fatalf("row settled by %q, want %q", s, c.want)
			}
			if n := e.stats.Read().Canceled; n != 1 {
				t.Fatalf("Stats().Canceled = %d, want 1", n)
			}
			if e.Running() || e.Cancel(7, c.cause) {
				t.Fatal("a handler still found after its handling ended")
			}
		})
	}
}
