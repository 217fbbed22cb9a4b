package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/claim/advisory"
	"github.com/sqlinbox/sqlinbox/claim/lease"
	"github.com/sqlinbox/sqlinbox/claim/rowlock"
	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/internal/claim"
	"github.com/sqlinbox/sqlinbox/migrations"
	"github.com/sqlinbox/sqlinbox/notify"
)

// cancelCase is one form on one database, told of cancels one way.
type cancelCase struct {
	form claim.Form
	db   string
	// how the instance hears of a cancel: "poll" (its cancel poll),
	// "notify" (Postgres LISTEN/NOTIFY, its poll set past the test's
	// bound), "hub" (the operator's broker shares the process's hub).
	how string
}

func (c cancelCase) name() string { return c.form.Name() + "/" + c.db + "/" + c.how }

var cancelCases = []cancelCase{
	{lease.Form, "sqlite", "poll"}, {lease.Form, "sqlite", "hub"},
	{lease.Form, "postgres", "poll"}, {lease.Form, "postgres", "notify"},
	{rowlock.Form, "postgres", "notify"}, {advisory.Form, "postgres", "notify"},
	{rowlock.Form, "postgres", "poll"}, {advisory.Form, "postgres", "poll"},
	{lease.Form, "mysql", "poll"}, {rowlock.Form, "mysql", "poll"}, {advisory.Form, "mysql", "poll"},
}

// cancelRig is a registered instance whose handler waits for its context
// to end, and an operator on a broker of its own.
type cancelRig struct {
	b, ob   *inbox.Broker
	op      *inbox.Operator
	ref     inbox.QueueRef
	ev      *inboxtest.Events
	started chan int64
	ended   chan ended
}

type ended struct {
	id    int64
	at    time.Time
	cause error
}

func newCancelRig(t *testing.T, c cancelCase) *cancelRig {
	t.Helper()
	var url string
	switch c.db {
	case "sqlite":
		url = inboxtest.SQLite(t)
	case "postgres":
		url = inboxtest.Postgres(t)
	default:
		url = inboxtest.MySQL(t)
	}
	hub := notify.NewHub()
	opts := []inbox.Option{inbox.PollInterval(50 * time.Millisecond), inbox.WithHub(hub), inbox.MaxConns(8)}
	reg := []inbox.RegistryOption{inbox.RegistryHeartbeat(time.Second)}
	if c.how == "notify" {
		opts = append(opts, inbox.ListenNotify())
		// Past the test's bound: only a notification is in time.
		reg = []inbox.RegistryOption{inbox.RegistryHeartbeat(time.Minute), inbox.RegistryCancelPoll(time.Minute)}
	}
	r := &cancelRig{b: open(t, url, opts...), ev: inboxtest.NewEvents(t), started: make(chan int64, 16), ended: make(chan ended, 16)}
	ohub := notify.NewHub()
	if c.how == "hub" {
		ohub = hub
		reg = append(reg, inbox.RegistryCancelPoll(time.Minute))
	}
	r.ob = open(t, url, inbox.WithHub(ohub), inbox.MaxConns(4))
	r.op = inbox.NewOperator(r.ob)
	r.ref = inbox.QueueRef{Table: "jobs"}
	if err := migrations.ApplyRegistry(context.Background(), r.b.DB()); err != nil {
		t.Fatal(err)
	}
	svc := inbox.NewService("cancels", "1", r.b)
	svc.Signals = false
	if err := svc.Register(reg...); err != nil {
		t.Fatal(err)
	}
	_, err := inbox.Handle(svc, inbox.MustQueue[Job]("jobs"), func(ctx context.Context, j Job) error {
		r.started <- j.ID
		<-ctx.Done()
		r.ended <- ended{id: j.ID, at: time.Now(), cause: context.Cause(ctx)}
		if j.ID%2 == 0 {
			return nil // a handler that says it succeeded: the cancel stands
		}
		return ctx.Err()
	}, inbox.Form(c.form), inbox.Workers(2), r.ev.Observe())
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(rctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("service: %v", err)
		}
	})
	select {
	case <-svc.Started():
	case err := <-done:
		t.Fatalf("service stopped at start: %v", err)
	}
	return r
}

// TestCancel: a row in work is canceled on every form and database, its
// handler's context ending with ErrCanceled within a second (the figures
// are logged: p50 and p99 from the Cancel call to the context's end), and
// is parked with the cancel as its last error whatever the handler
// returned; its request is gone once it is. A row not in work is parked at
// once, and a cancel that deletes deletes.
func TestCancel(t *testing.T) {
	for _, c := range cancelCases {
		t.Run(c.name(), func(t *testing.T) {
			t.Parallel()
			r := newCancelRig(t, c)
			ctx := context.Background()
			const n = 20
			var lat []time.Duration
			for i := range n {
				insert(t, r.b.DB(), 1)
				id := receive(t, r.started, "a handler to start")
				at := time.Now()
				res, err := r.op.Cancel(ctx, r.ref, []int64{id}, inbox.CancelOptions{Reason: fmt.Sprintf("test %d", i)})
				if err != nil {
					t.Fatal(err)
				}
				e := receive(t, r.ended, "the handler's context to end")
				lat = append(lat, e.at.Sub(at))
				var cc *inbox.CancelCause
				if e.id != id || !errors.Is(e.cause, inbox.ErrCanceled) || !errors.As(e.cause, &cc) || cc.Reason != fmt.Sprintf("test %d", i) {
					t.Fatalf("handler of row %d ended with %v, want row %d canceled", e.id, e.cause, id)
				}
				// A row an advisory handler holds looks available and is
				// parked at once; in the other forms the held row is left
				// to its holder.
				if res.InWork+res.Stopped != 1 || len(res.Missing) != 0 || c.form != advisory.Form && res.InWork != 1 {
					t.Fatalf("cancel of a row in work = %+v", res)
				}
				r.ev.Wait("the cancel settled", func(es []inbox.Event) bool {
					return slices.ContainsFunc(es, func(ev inbox.Event) bool { return ev.ID == id && ev.Outcome == inbox.Canceled })
				})
				rows, err := r.op.Rows(ctx, r.ref, inbox.RowFilter{IDs: []int64{id}})
				if err != nil {
					t.Fatal(err)
				}
				if len(rows) != 1 || rows[0].State != inbox.StateParked || !strings.Contains(rows[0].LastError, fmt.Sprintf("canceled by an operator: test %d", i)) {
					t.Fatalf("row %d after its cancel: %+v, want parked with the cancel as its last error", id, rows)
				}
			}
			eventually(t, "the cancel requests to be deleted", func() bool { return cancelRequests(t, r) == 0 })
			slices.Sort(lat)
			p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
			t.Logf("cancel to context end, %s: p50 %v, p99 %v, max %v (%d cancels)", c.name(), p50, p99, lat[len(lat)-1], n)
			if p99 > 2*time.Second {
				t.Fatalf("cancel to context end p99 %v, want well within a second (bound 2s on a loaded machine)", p99)
			}
			if st := r.ev.Wait("", func([]inbox.Event) bool { return true }); inboxtest.Count(st, inbox.Acked)+inboxtest.Count(st, inbox.Retried) != 0 {
				t.Fatalf("a canceled row was acked or retried: %+v", st)
			}

			// Deleting: the row in work is deleted, not parked.
			insert(t, r.b.DB(), 1)
			id := receive(t, r.started, "a handler to start")
			if _, err := r.op.Cancel(ctx, r.ref, []int64{id}, inbox.CancelOptions{Delete: true}); err != nil {
				t.Fatal(err)
			}
			receive(t, r.ended, "the handler's context to end")
			r.ev.Wait("the delete", func(es []inbox.Event) bool {
				return slices.ContainsFunc(es, func(ev inbox.Event) bool {
					// A row an advisory handler holds looks available: Cancel
					// deletes it itself, and the holder finds it gone.
					return ev.ID == id && (ev.Outcome == inbox.Canceled || c.form == advisory.Form && ev.Outcome == inbox.Lost)
				})
			})
			if rows, err := r.op.Rows(ctx, r.ref, inbox.RowFilter{IDs: []int64{id}}); err != nil || len(rows) != 0 {
				t.Fatalf("row %d after a deleting cancel: %+v, %v; want it gone", id, rows, err)
			}
		})
	}
}

// A row not in work is parked at once; a parked one stays as it is; an id
// with no row is reported missing; Unpark clears a request left behind, so
// the unparked row runs to its ack.
func TestCancelNotInWork(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		ctx := context.Background()
		b := open(t, url, inbox.PollInterval(50*time.Millisecond), inbox.WithHub(notify.NewHub()))
		if err := migrations.ApplyRegistry(ctx, b.DB()); err != nil {
			t.Fatal(err)
		}
		op := inbox.NewOperator(b)
		ref := inbox.QueueRef{Table: "jobs"}
		insert(t, b.DB(), 2)
		res, err := op.Cancel(ctx, ref, []int64{1, 2, 99}, inbox.CancelOptions{Reason: "no longer wanted"})
		if err != nil {
			t.Fatal(err)
		}
		if res.Stopped != 2 || res.InWork != 0 || !slices.Equal(res.Missing, []int64{99}) {
			t.Fatalf("cancel = %+v, want 2 stopped and 99 missing", res)
		}
		rows, err := op.Rows(ctx, ref, inbox.RowFilter{})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if r.State != inbox.StateParked || r.LastError != "inbox: canceled by an operator: no longer wanted" {
				t.Fatalf("row after cancel: %+v", r)
			}
		}
		if res, err := op.Cancel(ctx, ref, []int64{1}, inbox.CancelOptions{}); err != nil || res.Stopped != 0 || res.InWork != 0 || len(res.Missing) != 0 {
			t.Fatalf("cancel of a parked row = %+v, %v; want nothing done", res, err)
		}
		// A request left behind (its holder died after parking the row)
		// does not outlive an unpark.
		if _, err := b.DB().Exec("INSERT INTO sqlinbox_cancels (table_name, row_id, action, reason, requested_at) VALUES ('jobs', 2, 'park', '', 0)"); err != nil {
			t.Fatal(err)
		}
		if n, err := op.Unpark(ctx, ref, inbox.Selection{IDs: []int64{2}}); err != nil || n != 1 {
			t.Fatalf("unpark = %d, %v", n, err)
		}
		var left int
		if err := b.DB().QueryRow("SELECT count(*) FROM sqlinbox_cancels").Scan(&left); err != nil || left != 0 {
			t.Fatalf("cancel requests after unpark: %d, %v; want none", left, err)
		}
		res, err = op.Cancel(ctx, ref, []int64{1}, inbox.CancelOptions{Delete: true})
		if err != nil || res.Stopped != 1 || rows2(t, b) != 1 {
			t.Fatalf("deleting cancel of a parked row = %+v, %v, %d rows left; want it deleted", res, err, rows2(t, b))
		}
		if _, err := op.Cancel(ctx, ref, nil, inbox.CancelOptions{}); err == nil {
			t.Fatal("cancel of no rows: no error")
		}
	})
}

func rows2(t *testing.T, b *inbox.Broker) int { return rows(t, b.DB()) }

func cancelRequests(t *testing.T, r *cancelRig) int {
	t.Helper()
	var n int
	if err := r.ob.DB().QueryRow("SELECT count(*) FROM sqlinbox_cancels").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// receive receives one value from ch, failing the test after 30s.
func receive[T any](t *testing.T, ch chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("waited 30s for %s", what)
	}
	panic("unreachable")
}

// A request recorded while no instance ran the row (its holder died before
// the cancel reached it) cancels the handling of the instance that claims
// it next, at its poll, on every database.
func TestCancelReachesTheNextClaim(t *testing.T) {
	for _, db := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(db, func(t *testing.T) {
			t.Parallel()
			r := newCancelRig(t, cancelCase{lease.Form, db, "poll"})
			// The table is new: its first row gets id 1.
			if _, err := r.ob.DB().Exec("INSERT INTO sqlinbox_cancels (table_name, row_id, action, reason, requested_at) VALUES ('jobs', 1, 'park', 'holder died', 0)"); err != nil {
				t.Fatal(err)
			}
			insert(t, r.b.DB(), 1)
			if id := receive(t, r.started, "the handler to start"); id != 1 {
				t.Fatalf("handler started on row %d, want 1", id)
			}
			if e := receive(t, r.ended, "the handler's context to end"); !errors.Is(e.cause, inbox.ErrCanceled) {
				t.Fatalf("handler's context ended with %v, want ErrCanceled", e.cause)
			}
			r.ev.Wait("the cancel settled", func(es []inbox.Event) bool { return inboxtest.Count(es, inbox.Canceled) == 1 })
			rows, err := r.op.Rows(context.Background(), r.ref, inbox.RowFilter{IDs: []int64{1}})
			if err != nil || len(rows) != 1 || rows[0].State != inbox.StateParked || rows[0].LastError != "inbox: canceled by an operator: holder died" {
				t.Fatalf("row 1: %+v, %v; want parked by the cancel", rows, err)
			}
			eventually(t, "the request deleted", func() bool { return cancelRequests(t, r) == 0 })
		})
	}
}
