package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
)

// instances starts two instances of the service on url, each with a broker
// of its own on one fake clock, their handlings recorded by rec.
func instances(t *testing.T, url string, done chan Rendered) (*inboxtest.Run, *inboxtest.Recorder[RenderInvoice], []*inbox.Broker) {
	t.Helper()
	dir := t.TempDir()
	clk := inboxtest.NewClock()
	var (
		run     *inboxtest.Run
		rec     *inboxtest.Recorder[RenderInvoice]
		brokers []*inbox.Broker
	)
	for _, name := range []string{"a", "b"} {
		b, err := inbox.Open(url, inbox.WithClock(clk), inbox.PollInterval(250*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		inboxtest.UseClock(t, b, clk)
		if rec == nil {
			rec = inboxtest.NewRecorder(t, b, Queue)
		}
		svc, _, err := NewService(name, b, Queue, rec.Wrap(name, Renderer(name, dir, done)), rec.Observe(name))
		if err != nil {
			t.Fatal(err)
		}
		run = inboxtest.Start(t, svc)
		brokers = append(brokers, b)
	}
	return run, rec, brokers
}

// Two instances on one table render each of 20 invoices, written by plain
// SQL, exactly once, and never both at once.
func renderedOnce(t *testing.T, url string) {
	done := make(chan Rendered, 100)
	run, rec, brokers := instances(t, url, done)
	// The shop writes every invoice twice, and publishes three of them
	// again: a key names each invoice, so each is queued, and rendered, once.
	// The instances first make their first claims, which could take rows
	// of the first write and ack them before the second: a key lasts while
	// its row exists.
	run.Idle()
	for range 2 {
		if err := WriteInvoices(context.Background(), brokers[0].DB(), "", 1, 20); err != nil {
			t.Fatal(err)
		}
	}
	for n := 1; n <= 3; n++ {
		payload, _ := json.Marshal(Invoice{Number: n})
		id, err := inbox.Publish(context.Background(), brokers[1], Queue, RenderInvoice{Payload: payload, Key: InvoiceKey("", n)})
		if !errors.Is(err, inbox.ErrDuplicate) || id != int64(n) {
			t.Fatalf("invoice %d published again: id %d, %v; want row %d and ErrDuplicate", n, id, err, n)
		}
	}
	// Rows written by plain SQL wake nobody: the next poll finds them.
	run.Advance(250 * time.Millisecond)
	rec.WaitHandlings(20)
	rec.WaitDrained()
	run.Idle()
	var ids []int64 // a fresh table numbers its rows from 1
	for id := range int64(20) {
		ids = append(ids, id+1)
	}
	rec.ExactlyOnce(ids...)
	for range 20 {
		r := <-done
		text, err := os.ReadFile(r.Path)
		if err != nil || !strings.Contains(string(text), "Rendered by: "+r.Instance) {
			t.Fatalf("invoice file %s: %q, %v", r.Path, text, err)
		}
	}
}

func TestTwoInstancesRenderEachInvoiceOnce(t *testing.T) {
	renderedOnce(t, inboxtest.SQLite(t))
}

func TestTwoInstancesRenderEachInvoiceOncePostgres(t *testing.T) {
	renderedOnce(t, inboxtest.Postgres(t))
}

func TestTwoInstancesRenderEachInvoiceOnceMySQL(t *testing.T) {
	renderedOnce(t, inboxtest.MySQL(t))
}

// A row another program writes is seen within the quarter second of the
// poll interval, on the real clock.
func TestRowFromAnotherProgramSeenWithinPoll(t *testing.T) {
	url := inboxtest.SQLite(t)
	done := make(chan Rendered, 10)
	in, err := NewInstance("a", url, Queue, t.TempDir(), done)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Broker.Close() })
	run := inboxtest.StartLive(t, in.Service)
	run.Idle()
	shop := inboxtest.Open(t, url) // another program's own pool
	begin := time.Now()
	if err := WriteInvoices(context.Background(), shop, "", 7, 1); err != nil {
		t.Fatal(err)
	}
	inboxtest.WaitDrained(t, in.Broker, Queue)
	waited := time.Since(begin)
	t.Logf("invoice written by another program rendered after %v (poll interval 250ms)", waited)
	if r := <-done; r.Invoice != 7 || waited > 2*time.Second {
		t.Fatalf("rendered invoice %d after %v", r.Invoice, waited)
	}
}

// A publish through the broker reaches its own instance at once: on a fake
// clock no poll ever fires, so only the wake can explain it.
func TestPublishReachesOwnInstanceAtOnce(t *testing.T) {
	done := make(chan Rendered, 10)
	run, rec, brokers := instances(t, inboxtest.SQLite(t), done)
	run.Idle()
	payload, _ := json.Marshal(Invoice{Number: 42, Customer: "Ada Lovelace", Total: 9.99})
	id, err := inbox.Publish(context.Background(), brokers[0], Queue, RenderInvoice{Payload: payload})
	if err != nil {
		t.Fatal(err)
	}
	h := rec.WaitHandled(id)
	if r := <-done; r.Invoice != 42 || h.Outcome != inbox.Acked {
		t.Fatalf("rendered invoice %d, handling %v: want 42 acked", r.Invoice, h)
	}
	if now := run.Clock.Now(); !now.Equal(inboxtest.Epoch) {
		t.Fatalf("the clock moved to %v", now)
	}
}

// Run starts the instances and stops both when its context ends.
func TestRunStartsAndStops(t *testing.T) {
	url := inboxtest.SQLite(t)
	var ins []*Instance
	for _, name := range []string{"a", "b"} {
		in, err := NewInstance(name, url, Queue, t.TempDir(), make(chan Rendered, 1))
		if err != nil {
			t.Fatal(err)
		}
		ins = append(ins, in)
	}
	ctx, cancel := context.WithCancel(context.Background())
	started, stopped := Run(ctx, ins...)
	select {
	case <-started:
	case err := <-stopped:
		t.Fatalf("instances did not start: %v", err)
	case <-time.After(inboxtest.Timeout):
		t.Fatal("instances did not start in time")
	}
	cancel()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("instances stopped with: %v", err)
		}
	case <-time.After(inboxtest.Timeout):
		t.Fatal("instances did not stop in time")
	}
}

// The demo, as `go run ./examples/invoices` runs it: on either database both
// instances render invoices, and a row of the table the demo did not write
// is left as it was.
func TestDemoSharesWorkAndTouchesOnlyItsRows(t *testing.T) {
	for name, url := range map[string]string{
		"sqlite":   "sqlite://" + t.TempDir() + "/invoices.db",
		"postgres": inboxtest.Postgres(t),
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			other := inboxtest.Open(t, url)
			if err := Migrate(ctx, other); err != nil {
				t.Fatal(err)
			}
			if err := WriteInvoices(ctx, other, "someone-else", 99, 1); err != nil {
				t.Fatal(err)
			}
			// 40 invoices: one instance alone needs 10 rounds of its four
			// workers (500 ms at RenderTime), two poll intervals; with 20
			// (one interval) the other, starved of CPU in a loaded -race
			// run, once claimed nothing before the first had rendered all.
			var out strings.Builder
			per, err := demo(ctx, url, 40, false, &out)
			if err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			if per["instance-a"] == 0 || per["instance-b"] == 0 {
				t.Fatalf("one instance did all the work: %v\n%s", per, out.String())
			}
			var left int
			if err := other.QueryRowContext(ctx, "SELECT count(*) FROM invoice_jobs WHERE group_name = 'someone-else' AND attempts = 0 AND locked_until IS NULL").Scan(&left); err != nil {
				t.Fatal(err)
			}
			if left != 1 {
				t.Fatalf("the row the demo did not write was touched (%d left as it was)", left)
			}
		})
	}
}

// The instances register themselves (the registry's tables made at start),
// so `inbox queues` and `inbox dashboard` on the same database show the
// invoice queues and both instances as soon as they start.
func TestInstancesShowInTheRegistry(t *testing.T) {
	url := "sqlite://" + t.TempDir() + "/invoices.db"
	var ins []*Instance
	for _, name := range []string{"a", "b"} {
		in, err := NewInstance(name, url, Queue.Group("eu"), t.TempDir(), make(chan Rendered, 1))
		if err != nil {
			t.Fatal(err)
		}
		ins = append(ins, in)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started, stopped := Run(ctx, ins...)
	select {
	case <-started:
	case err := <-stopped:
		t.Fatalf("instances did not start: %v", err)
	case <-time.After(inboxtest.Timeout):
		t.Fatal("instances did not start in time")
	}
	operator, err := inbox.Open(url) // the command line's own pool
	if err != nil {
		t.Fatal(err)
	}
	defer operator.Close()
	qs, err := inbox.NewOperator(operator).Queues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, q := range qs {
		got[q.Table+"/"+q.Group] = q.Instances
	}
	if want := map[string]int{Table + "/eu": 2, SendTable + "/eu": 2}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("registered queues (instances of each) %v, want %v", got, want)
	}
	cancel()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
}
