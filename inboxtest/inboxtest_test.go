package inboxtest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// Job is the reference table's row.
type Job struct {
	ID          int64          `db:"id" inbox:"id,generated"`
	LockedUntil *time.Time     `db:"locked_until" inbox:"locked_until"`
	Payload     []byte         `db:"payload" inbox:"payload"`
	Group       string         `db:"group_name" inbox:"group"`
	Attempts    int            `db:"attempts" inbox:"attempts"`
	LastError   sql.NullString `db:"last_error" inbox:"last_error"`
}

var jobs = inbox.MustQueue[Job]("jobs")

func eachDB(t *testing.T, f func(t *testing.T, url string)) {
	t.Run("sqlite", func(t *testing.T) { t.Parallel(); f(t, inboxtest.SQLite(t)) })
	t.Run("postgres", func(t *testing.T) { t.Parallel(); f(t, inboxtest.Postgres(t)) })
}

// service makes a service on b handling jobs with h, recorded by rec as
// instance name; the table is created at start.
func service(t testing.TB, b *inbox.Broker, name string, rec *inboxtest.Recorder[Job], h inbox.Handler[Job], opts ...inbox.SubOption) *inbox.Service {
	t.Helper()
	svc := inbox.NewService(name, "test", b)
	svc.OnStart(func(ctx context.Context) error { return migrations.Apply(ctx, b.DB(), "jobs") })
	opts = append([]inbox.SubOption{rec.Observe(name)}, opts...)
	if _, err := inbox.Handle(svc, jobs, rec.Wrap(name, h), opts...); err != nil {
		t.Fatal(err)
	}
	return svc
}

func publish(t testing.TB, b *inbox.Broker, q inbox.Queue[Job], n int, opts ...inbox.PublishOption) []int64 {
	t.Helper()
	var ids []int64
	for i := range n {
		id, err := inbox.Publish(context.Background(), b, q, Job{Payload: fmt.Appendf(nil, "job %d", i)}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

func ok(context.Context, Job) error { return nil }

// Two instances on one fake clock handle every row once; the recorder sees
// each handling settled as acked.
func TestStartTwoInstancesExactlyOnce(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		a, b := inboxtest.NewBroker(t, url), inboxtest.NewBroker(t, url)
		rec := inboxtest.NewRecorder(t, a, jobs)
		run := inboxtest.Start(t, service(t, a, "a", rec, ok, inbox.Workers(4)))
		inboxtest.Start(t, service(t, b, "b", rec, ok, inbox.Workers(4)))
		ids := publish(t, a, jobs, 30)
		hs := rec.WaitHandlings(30)
		rec.WaitDrained()
		rec.ExactlyOnce(ids...)
		for _, h := range hs {
			if h.Outcome != inbox.Acked || h.Attempt != 1 || h.Err != nil {
				t.Errorf("handling %v: want acked on attempt 1", h)
			}
		}
		if now := run.Now(); !now.Equal(inboxtest.Epoch) {
			t.Errorf("the fake clock moved by itself to %v", now)
		}
	})
}

// A failed row waits out its backoff on the fake clock: Rows shows it
// locked with its attempt and error, and Advance brings it back.
func TestAdvanceBringsBackARetry(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		b := inboxtest.NewBroker(t, url)
		rec := inboxtest.NewRecorder(t, b, jobs)
		var calls atomic.Int32
		h := func(ctx context.Context, j Job) error {
			if calls.Add(1) == 1 {
				return errors.New("printer on fire")
			}
			return nil
		}
		run := inboxtest.Start(t, service(t, b, "a", rec, h, inbox.Backoff(func(int) time.Duration { return time.Minute })))
		id := publish(t, b, jobs, 1)[0]
		if got := rec.WaitHandled(id); got.Outcome != inbox.Retried || got.Err == nil {
			t.Fatalf("first handling %v: want retried with an error", got)
		}
		rows := inboxtest.Rows(t, b, jobs)
		want := inboxtest.Row{ID: id, LockedUntil: inboxtest.Epoch.Add(time.Minute), State: inboxtest.Locked, Attempts: 1, LastError: "printer on fire"}
		if len(rows) != 1 || rows[0] != want {
			t.Fatalf("rows %v, want [%v]", rows, want)
		}
		run.Advance(59 * time.Second)
		run.Idle()
		if n := rec.Count(id); n != 1 {
			t.Fatalf("handled %d times before the backoff passed", n)
		}
		run.Advance(time.Second)
		rec.WaitHandlings(2)
		rec.WaitDrained()
		if hs := rec.Handlings(); hs[1].Outcome != inbox.Acked || hs[1].Attempt != 2 {
			t.Fatalf("second handling %v: want acked on attempt 2", hs[1])
		}
		rec.NoOverlaps()
	})
}

// A retry shorter than the poll comes back at the Advance that passes it,
// not at the next poll, and WaitNextHandled waits for each handling of
// the row in turn, even one that happened before it was called.
func TestAdvanceWakesARetryBeforeThePoll(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		b := inboxtest.NewBroker(t, url, inbox.PollInterval(time.Hour))
		rec := inboxtest.NewRecorder(t, b, jobs)
		var calls atomic.Int32
		h := func(ctx context.Context, j Job) error {
			if calls.Add(1) <= 2 {
				return inbox.RetryAfter(500*time.Millisecond, errors.New("not yet"))
			}
			return nil
		}
		run := inboxtest.Start(t, service(t, b, "a", rec, h))
		id := publish(t, b, jobs, 1)[0]
		if first := rec.WaitHandled(id); first.Outcome != inbox.Retried {
			t.Fatalf("first handling %v: want retried", first)
		}
		run.Advance(499 * time.Millisecond)
		run.Idle()
		if n := rec.Count(id); n != 1 {
			t.Fatalf("handled %d times before the retry's delay passed", n)
		}
		run.Advance(time.Millisecond)
		if second := rec.WaitNextHandled(id); second.Outcome != inbox.Retried || second.Attempt != 2 {
			t.Fatalf("second handling %v: want retried on attempt 2", second)
		}
		run.Advance(500 * time.Millisecond)
		run.Idle() // the third handling happens before the wait below
		if third := rec.WaitNextHandled(id); third.Outcome != inbox.Acked || third.Attempt != 3 {
			t.Fatalf("third handling %v: want acked on attempt 3", third)
		}
		if again := rec.WaitHandled(id); again.Attempt != 3 {
			t.Fatalf("WaitHandled after the last handling returned %v, want attempt 3", again)
		}
		rec.WaitDrained()
	})
}

// A row that fails its last attempt is parked, and ParkedRows shows it.
func TestParkedRows(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		b := inboxtest.NewBroker(t, url)
		rec := inboxtest.NewRecorder(t, b, jobs)
		fail := func(context.Context, Job) error { return errors.New("bad invoice") }
		inboxtest.Start(t, service(t, b, "a", rec, fail, inbox.MaxAttempts(1)))
		ids := publish(t, b, jobs, 2)
		rec.WaitHandlings(2)
		parked := inboxtest.ParkedRows(t, b, jobs)
		if len(parked) != 2 || parked[0].ID != ids[0] || parked[1].ID != ids[1] {
			t.Fatalf("parked %v, want ids %v", parked, ids)
		}
		for _, r := range parked {
			if r.Attempts != 1 || r.LastError != "bad invoice" {
				t.Errorf("parked row %v: want attempts 1 and the handler's error", r)
			}
		}
	})
}

// Rows of one group, a delayed row's lease state, and a drained group while
// another group still holds rows.
func TestRowsOfAGroup(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		b := inboxtest.NewBroker(t, url)
		if err := migrations.Apply(context.Background(), b.DB(), "jobs"); err != nil {
			t.Fatal(err)
		}
		eu, us := jobs.Group("eu"), jobs.Group("us")
		publish(t, b, eu, 2)
		late := publish(t, b, us, 1, inbox.Delay(time.Hour))[0]
		rows := inboxtest.Rows(t, b, us)
		want := inboxtest.Row{ID: late, Group: "us", LockedUntil: inboxtest.Epoch.Add(time.Hour), State: inboxtest.Locked}
		if len(rows) != 1 || rows[0] != want {
			t.Fatalf("rows of us %v, want [%v]", rows, want)
		}
		if rows := inboxtest.Rows(t, b, eu); len(rows) != 2 || rows[0].State != inboxtest.Available || rows[0].Group != "eu" {
			t.Fatalf("rows of eu %v: want two available", rows)
		}
		if n := len(inboxtest.Rows(t, b, jobs)); n != 3 {
			t.Fatalf("%d rows in the table, want 3", n)
		}
		rec := inboxtest.NewRecorder(t, b, eu)
		svc := inbox.NewService("eu", "test", b)
		if _, err := inbox.Handle(svc, eu, rec.Wrap("eu", ok)); err != nil {
			t.Fatal(err)
		}
		inboxtest.Start(t, svc)
		inboxtest.WaitDrained(t, b, eu)
		if n := len(inboxtest.Rows(t, b, us)); n != 1 {
			t.Fatalf("the us group lost its row: %d left", n)
		}
	})
}

// The recorder reports two handlings of one row at once, and only those.
func TestRecorderReportsOverlaps(t *testing.T) {
	b := inboxtest.NewBroker(t, inboxtest.SQLite(t))
	rec := inboxtest.NewRecorder(t, b, jobs)
	inside := make(chan struct{})
	release := make(chan struct{})
	var released atomic.Bool
	h := rec.Wrap("x", func(ctx context.Context, j Job) error {
		if j.ID == 1 && !released.Load() {
			inside <- struct{}{}
			<-release
		}
		return nil
	})
	var wg sync.WaitGroup
	wg.Go(func() { _ = h(context.Background(), Job{ID: 1}) })
	<-inside
	wg.Go(func() { _ = h(context.Background(), Job{ID: 1}) })
	<-inside
	_ = h(context.Background(), Job{ID: 2}) // another row meanwhile: no overlap
	released.Store(true)
	close(release)
	wg.Wait()
	_ = h(context.Background(), Job{ID: 1}) // after both: no overlap
	ov := rec.Overlaps()
	if len(ov) != 1 || ov[0].First.ID != 1 || ov[0].Second.ID != 1 || ov[0].Second.Start.After(ov[0].First.End) {
		t.Fatalf("overlaps %v, want one of id 1", ov)
	}
	if c := rec.Counts(); c[1] != 3 || c[2] != 1 {
		t.Fatalf("counts %v, want id 1 three times and id 2 once", c)
	}
	ft := &fakeT{TB: t}
	r2 := inboxtest.NewRecorder(ft, b, jobs)
	_ = r2.Wrap("x", ok)(context.Background(), Job{ID: 7})
	r2.ExactlyOnce(7)
	if len(ft.errs) != 0 {
		t.Fatalf("ExactlyOnce failed on a row handled once: %v", ft.errs)
	}
	r3 := inboxtest.NewRecorder(ft, b, jobs)
	_ = r3.Wrap("x", ok)(context.Background(), Job{ID: 7})
	_ = r3.Wrap("y", ok)(context.Background(), Job{ID: 7})
	_ = r3.Wrap("y", ok)(context.Background(), Job{ID: 8})
	r3.ExactlyOnce(7)
	if len(ft.errs) != 1 || !strings.Contains(ft.errs[0], "id 7 handled 2 times") || !strings.Contains(ft.errs[0], "id 8 handled 1 times, not expected") {
		t.Fatalf("ExactlyOnce on a row handled twice reported %q", ft.errs)
	}
}

// A panicking handler is recorded with the panic as its error, and the
// panic still reaches the subscription.
func TestRecorderPanic(t *testing.T) {
	b := inboxtest.NewBroker(t, inboxtest.SQLite(t))
	rec := inboxtest.NewRecorder(t, b, jobs)
	h := rec.Wrap("x", func(context.Context, Job) error { panic("boom") })
	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Fatalf("recovered %v, want the handler's panic", p)
			}
		}()
		_ = h(context.Background(), Job{ID: 3})
	}()
	if hs := rec.Handlings(); len(hs) != 1 || hs[0].Err == nil || hs[0].Err.Error() != "panic: boom" || hs[0].End.IsZero() {
		t.Fatalf("handlings %v", hs)
	}
}

// fakeT records failures; Fatalf ends the goroutine as testing's does.
type fakeT struct {
	testing.TB
	mu       sync.Mutex
	errs     []string
	cleanups []func()
}

func (f *fakeT) Helper() {}
func (f *fakeT) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs = append(f.errs, fmt.Sprintf(format, args...))
}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.Errorf(format, args...)
	runtime.Goexit()
}
func (f *fakeT) Cleanup(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cleanups = append(f.cleanups, fn)
}
func (f *fakeT) cleanup() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}

// run calls f as a test body on ft and reports whether it ran to its end.
func (f *fakeT) run(body func()) (finished bool) {
	done := make(chan bool)
	go func() {
		ok := false
		defer func() { done <- ok }()
		body()
		ok = true
	}()
	return <-done
}

func (f *fakeT) failures() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.errs, "\n")
}

// shortTimeout shortens inboxtest.Timeout for a test that expects a wait
// to fail. Such tests do not run in parallel: Timeout is package state.
func shortTimeout(t *testing.T, d time.Duration) {
	old := inboxtest.Timeout
	inboxtest.Timeout = d
	t.Cleanup(func() { inboxtest.Timeout = old })
}

// A wait that passes its deadline fails the test with the rows left, their
// attempts and last errors.
func TestWaitDrainedFailsWithRowsLeft(t *testing.T) {
	shortTimeout(t, time.Second)
	url := inboxtest.SQLite(t)
	b := inboxtest.NewBroker(t, url)
	rec := inboxtest.NewRecorder(t, b, jobs)
	fail := func(context.Context, Job) error { return errors.New("no paper") }
	inboxtest.Start(t, service(t, b, "a", rec, fail))
	id := publish(t, b, jobs, 1)[0]
	rec.WaitHandled(id)

	ft := &fakeT{TB: t}
	if ft.run(func() { inboxtest.WaitDrained(ft, b, jobs) }) {
		t.Fatal("WaitDrained returned with a row left")
	}
	msg := ft.failures()
	for _, want := range []string{"waited 1s for the queue to drain", "1 rows left", fmt.Sprintf("id %d", id), "attempts 1", `last error "no paper"`, "locked until 2026-01-01T00:00:00.952Z"} {
		if !strings.Contains(msg, want) {
			t.Errorf("failure %q does not say %q", msg, want)
		}
	}
	ft2 := &fakeT{TB: t}
	r2 := inboxtest.NewRecorder(ft2, b, jobs)
	if ft2.run(func() { r2.WaitHandled(id) }) {
		t.Fatal("WaitHandled returned for a row its recorder never saw")
	}
	if msg := ft2.failures(); !strings.Contains(msg, fmt.Sprintf("a handling of id %d", id)) || !strings.Contains(msg, "handlings so far: none") || !strings.Contains(msg, `"no paper"`) {
		t.Errorf("WaitHandled failure %q lacks what it waited for or what is left", msg)
	}
}

// Start refuses a broker whose clock it does not know, and fails the test
// when a startup hook fails; a service that does not stop at cleanup fails
// the test.
func TestStartFailures(t *testing.T) {
	shortTimeout(t, 2*time.Second)
	url := inboxtest.SQLite(t)
	plain, err := inbox.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	ft := &fakeT{TB: t}
	if ft.run(func() { inboxtest.Start(ft, inbox.NewService("plain", "test", plain)) }) {
		t.Fatal("Start ran a service on a clock it does not know")
	}
	if !strings.Contains(ft.failures(), "inboxtest.NewBroker") {
		t.Errorf("failure %q does not say how to fix it", ft.failures())
	}

	b := inboxtest.NewBroker(t, url)
	bad := inbox.NewService("bad", "test", b)
	bad.OnStart(func(context.Context) error { return errors.New("no table for you") })
	ft = &fakeT{TB: t}
	if ft.run(func() { inboxtest.Start(ft, bad) }) {
		t.Fatal("Start returned for a service whose startup hook failed")
	}
	ft.cleanup()
	if msg := ft.failures(); !strings.Contains(msg, "stopped before it started") || !strings.Contains(msg, "no table for you") {
		t.Errorf("failure %q", msg)
	}

	// A handler that does not return: the service cannot stop.
	stuck := make(chan struct{})
	entered := make(chan struct{}, 1)
	rec := inboxtest.NewRecorder(t, b, jobs)
	h := func(context.Context, Job) error { entered <- struct{}{}; <-stuck; return nil }
	ft = &fakeT{TB: t}
	svc := service(ft, b, "stuck", rec, h)
	if !ft.run(func() { inboxtest.Start(ft, svc) }) {
		t.Fatalf("Start: %s", ft.failures())
	}
	publish(t, b, jobs, 1)
	<-entered
	ft.cleanup()
	if msg := ft.failures(); !strings.Contains(msg, `service "stuck" did not stop within 2s`) {
		t.Errorf("cleanup of a service that cannot stop reported %q", msg)
	}
	close(stuck)
}

// StartLive runs on the host's clock: a row another program writes by plain
// SQL is found by the poll, without advancing anything.
func TestStartLiveRowFromAnotherProgram(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		b, err := inbox.Open(url, inbox.PollInterval(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		rec := inboxtest.NewRecorder(t, b, jobs)
		run := inboxtest.StartLive(t, service(t, b, "live", rec, ok))
		if run.Clock != nil {
			t.Fatal("StartLive has a fake clock")
		}
		run.Idle()
		other := inboxtest.Open(t, url)
		if _, err := other.Exec("INSERT INTO jobs (payload) VALUES ('x')"); err != nil {
			t.Fatal(err)
		}
		inboxtest.WaitDrained(t, b, jobs)
		if hs := rec.WaitHandlings(1); len(hs) != 1 || hs[0].Outcome != inbox.Acked {
			t.Fatalf("handlings %v", hs)
		}
	})
}
