package inbox_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/migrations"
	"github.com/sqlinbox/sqlinbox/notify"
)

// pollConnector opens pgx connections that hand the floors of each idle
// poll of a table's groups (its second argument, an array literal) to
// floors, without waiting.
type pollConnector struct {
	url    string
	floors chan string
}

func (c pollConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := stdlib.GetDefaultDriver().Open(c.url)
	if err != nil {
		return nil, err
	}
	return pollConn{wrapConn{conn}, c.floors}, nil
}

func (c pollConnector) Driver() driver.Driver { return wrapDriver{stdlib.GetDefaultDriver()} }

type pollConn struct {
	wrapConn
	floors chan string
}

func (c pollConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	if strings.Contains(q, "unnest(") && len(args) > 1 {
		select {
		case c.floors <- fmt.Sprint(args[1].Value):
		default:
		}
	}
	return c.wrapConn.QueryContext(ctx, q, args)
}

// With Hooks installed (as inboxotel.Instrument installs them), registered
// or not, an idle group subscription is polled from its claimer's floor,
// not from the table's start: the hooks' claim report and the pause gate
// run around the form's claim and hide none of the form's capabilities. A
// wrapper that embedded the claimer once hid its Floor, and every idle poll
// walked the dead index entries of every row drained since the last vacuum.
func TestIdlePollWithHooksStartsAtTheFloor(t *testing.T) {
	for _, registered := range []bool{false, true} {
		t.Run(fmt.Sprintf("registered=%t", registered), func(t *testing.T) {
			ctx := context.Background()
			url := inboxtest.Postgres(t)
			floors := make(chan string, 64)
			db := sql.OpenDB(pollConnector{url: url, floors: floors})
			t.Cleanup(func() { db.Close() })
			db.SetMaxOpenConns(8)
			if err := migrations.Apply(ctx, db, "jobs"); err != nil {
				t.Fatal(err)
			}
			if registered {
				if err := migrations.ApplyRegistry(ctx, db); err != nil {
					t.Fatal(err)
				}
			}
			b, err := inbox.New(db, inbox.PollInterval(50*time.Millisecond), inbox.WithHub(notify.NewHub()))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			q := inbox.MustQueue[Job]("jobs").Group("g")
			const rows = 20
			var first int64
			for i := range rows {
				id, err := inbox.Publish(ctx, b, q, Job{Payload: []byte("x")})
				if err != nil {
					t.Fatal(err)
				}
				if i == 0 {
					first = id
				}
			}
			svc := inbox.NewService("floors", "1", b)
			svc.Signals = false
			ev := inboxtest.NewEvents(t)
			sub, err := inbox.Handle(svc, q, func(context.Context, Job) error { return nil }, ev.Observe(), inbox.Workers(4))
			if err != nil {
				t.Fatal(err)
			}
			var claimed, handled, started atomic.Int64
			svc.AddHooks(inbox.Hooks{
				Claimed: func(*inbox.Subscription, inbox.ClaimEvent) { claimed.Add(1) },
				Handled: func(*inbox.Subscription, inbox.Event) { handled.Add(1) },
				Started: func(_ *inbox.Subscription, ctx context.Context, _ inbox.StartEvent) context.Context {
					started.Add(1)
					return ctx
				},
			})
			if registered {
				if err := svc.Register(); err != nil {
					t.Fatal(err)
				}
			}
			runService(t, svc)
			ev.Wait("every row acked", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Acked) == rows })
			inboxtest.Idle(t, sub)
			if claimed.Load() == 0 || handled.Load() != rows || started.Load() != rows {
				t.Fatalf("hooks saw %d claims, %d handlings, %d starts; want some claims and %d of each", claimed.Load(), handled.Load(), started.Load(), rows)
			}
			for len(floors) > 0 {
				<-floors // polls from before the subscription was idle
			}
			select {
			case got := <-floors:
				floor, err := strconv.ParseInt(strings.Trim(got, "{}"), 10, 64)
				if err != nil {
					t.Fatalf("the idle poll's floors %q: %v", got, err)
				}
				if floor < first {
					t.Fatalf("the idle poll of group g started at id %d, before the first row the subscription took (%d): the claimer's floor did not reach the poller", floor, first)
				}
			case <-time.After(inboxtest.Timeout):
				t.Fatalf("no idle poll within %v (poll interval 50ms)", inboxtest.Timeout)
			}
		})
	}
}

// runService runs svc until the test ends.
func runService(t *testing.T, svc *inbox.Service) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("service: %v", err)
		}
	})
	select {
	case <-svc.Started():
	case err := <-done:
		done <- err
		t.Fatalf("service stopped at start: %v", err)
	case <-time.After(inboxtest.Timeout):
		t.Fatalf("service not started within %v", inboxtest.Timeout)
	}
}

type startKey struct{}

// Hooks.Started gives a transactional handler its context too (a span,
// say): the hooks' start runs around whichever handler the subscription
// has. It used to wrap the plain handler only, which a transactional
// subscription never calls.
func TestHooksStartTransactionalHandlers(t *testing.T) {
	b := open(t, inboxtest.SQLite(t))
	q := inbox.MustQueue[Job]("jobs")
	ctx := context.Background()
	id, err := inbox.Publish(ctx, b, q, Job{Payload: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	svc := inbox.NewService("tx-starts", "1", b)
	svc.Signals = false
	seen := make(chan any, 1)
	if _, err := inbox.HandleTx(svc, q, func(ctx context.Context, _ *sql.Tx, _ Job) error {
		seen <- ctx.Value(startKey{})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	svc.AddHooks(inbox.Hooks{Started: func(_ *inbox.Subscription, ctx context.Context, s inbox.StartEvent) context.Context {
		return context.WithValue(ctx, startKey{}, s.ID)
	}})
	runService(t, svc)
	select {
	case got := <-seen:
		if got != id {
			t.Fatalf("the transactional handler's context carried %v from Hooks.Started, want the row's id %d", got, id)
		}
	case <-time.After(inboxtest.Timeout):
		t.Fatalf("the row was not handled within %v", inboxtest.Timeout)
	}
}
