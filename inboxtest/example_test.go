package inboxtest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// Email is a row of the service's outbox table.
type Email struct {
	ID          int64      `db:"id" inbox:"id,generated"`
	LockedUntil *time.Time `db:"locked_until" inbox:"locked_until"`
	Payload     []byte     `db:"payload" inbox:"payload"`
	Attempts    int        `db:"attempts" inbox:"attempts"`
	LastError   *string    `db:"last_error" inbox:"last_error"`
}

var emails = inbox.MustQueue[Email]("emails")

// newMailer is the service under test, as its own package would build it.
func newMailer(b *inbox.Broker, h inbox.Handler[Email], opts ...inbox.SubOption) (*inbox.Service, error) {
	svc := inbox.NewService("mailer", "1.0.0", b)
	svc.OnStart(func(ctx context.Context) error { return migrations.Apply(ctx, b.DB(), "emails") })
	_, err := inbox.Handle(svc, emails, h, opts...)
	return svc, err
}

// A test of a handler on SQLite in memory and a fake clock: the first send
// of one email fails, the test reads the row waiting out its backoff,
// advances the clock past it, and checks every email went exactly once. The
// body is what a TestMailer(t *testing.T) holds; asTest runs it here.
func Example() {
	asTest(func(t testing.TB) {
		b := inboxtest.NewBroker(t, inboxtest.SQLite(t)) // on a fake clock at inboxtest.Epoch
		rec := inboxtest.NewRecorder(t, b, emails)
		var mu sync.Mutex
		failed := false
		send := func(ctx context.Context, e Email) error {
			mu.Lock()
			defer mu.Unlock()
			if string(e.Payload) == "bob" && !failed {
				failed = true
				return errors.New("smtp: 421 try again later")
			}
			return nil
		}
		svc, err := newMailer(b, rec.Wrap("a", send), rec.Observe("a"))
		if err != nil {
			t.Fatal(err)
		}
		run := inboxtest.Start(t, svc)

		var ids []int64
		for _, to := range []string{"ada", "bob", "cy"} {
			id, err := inbox.Publish(context.Background(), b, emails, Email{Payload: []byte(to)})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		rec.WaitHandlings(3)
		for _, r := range inboxtest.Rows(t, b, emails) {
			fmt.Println(r)
		}
		run.Advance(time.Second) // the default backoff after one failure
		rec.WaitDrained()
		for _, id := range ids {
			fmt.Printf("id %d handled %d times\n", id, rec.Count(id))
		}
		rec.NoOverlaps()
	})
	// Output:
	// id 2: locked until 2026-01-01T00:00:00.974Z, attempts 1, last error "smtp: 421 try again later"
	// id 1 handled 1 times
	// id 2 handled 2 times
	// id 3 handled 1 times
}

// The same kind of test on Postgres, with two instances claiming from one
// table: each email goes exactly once and no row is held by both at once.
// inboxtest.Postgres gives the test a schema of its own on the server in
// POSTGRES_TEST_URL, or, with inboxtest/containers imported, on a Postgres it
// starts in Docker; otherwise the test is skipped.
func Example_postgres() {
	asTest(func(t testing.TB) {
		url := inboxtest.Postgres(t)
		rec := inboxtest.NewRecorder(t, inboxtest.NewBroker(t, url), emails)
		send := func(ctx context.Context, e Email) error { return nil }
		var brokers []*inbox.Broker
		for _, name := range []string{"a", "b"} {
			b := inboxtest.NewBroker(t, url)
			svc, err := newMailer(b, rec.Wrap(name, send), rec.Observe(name), inbox.Workers(4))
			if err != nil {
				t.Fatal(err)
			}
			inboxtest.Start(t, svc)
			brokers = append(brokers, b)
		}
		var ids []int64
		for i := range 50 {
			id, err := inbox.Publish(context.Background(), brokers[i%2], emails, Email{Payload: fmt.Appendf(nil, "user%d", i)})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		rec.WaitHandlings(50)
		rec.WaitDrained()
		rec.ExactlyOnce(ids...)
		fmt.Println("50 emails, each sent once")
	})
}

// asTest runs body as a test would, outside go test: these examples have no
// *testing.T. A failure or skip prints its message and ends the body;
// cleanups run after it.
func asTest(body func(t testing.TB)) {
	t := &exampleT{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		body(t)
	}()
	<-done
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}

type exampleT struct {
	testing.TB
	mu       sync.Mutex
	cleanups []func()
}

func (*exampleT) Name() string                   { return "Example" }
func (*exampleT) Helper()                        {}
func (*exampleT) Logf(format string, a ...any)   { fmt.Printf(format+"\n", a...) }
func (*exampleT) Errorf(format string, a ...any) { fmt.Fprintf(os.Stdout, "FAIL: "+format+"\n", a...) }
func (t *exampleT) Fatalf(format string, a ...any) {
	t.Errorf(format, a...)
	runtime.Goexit()
}
func (t *exampleT) Fatal(a ...any) { t.Fatalf("%s", fmt.Sprint(a...)) }
func (*exampleT) Skipf(format string, a ...any) {
	fmt.Printf("SKIP: "+format+"\n", a...)
	runtime.Goexit()
}
func (t *exampleT) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}
