package inbox_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/migrations"
	"github.com/sqlinbox/sqlinbox/notify"
)

// registered makes a service on b, registered with heartbeat every, with
// one subscription of h to jobs, and runs it until the returned stop.
func registered(t *testing.T, b *inbox.Broker, every time.Duration, h inbox.Handler[Job], opts ...inbox.SubOption) (*inbox.Service, *inbox.Subscription, func()) {
	t.Helper()
	ctx := context.Background()
	if err := migrations.ApplyRegistry(ctx, b.DB()); err != nil {
		t.Fatal(err)
	}
	svc := inbox.NewService("invoices", "1.2.3", b)
	svc.Signals = false
	if err := svc.Register(inbox.RegistryHeartbeat(every)); err != nil {
		t.Fatal(err)
	}
	sub, err := inbox.Handle(svc, inbox.MustQueue[Job]("jobs"), h, opts...)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(rctx) }()
	select {
	case <-svc.Started():
	case err := <-done:
		t.Fatalf("service stopped at start: %v", err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("service: %v", err)
		}
	}
	t.Cleanup(stop)
	return svc, sub, stop
}

// An instance records itself, its subscription and its handlings while it
// runs, and leaves when it stops.
func TestRegistryInstanceLeaves(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		ctx := context.Background()
		b := open(t, url, inbox.PollInterval(50*time.Millisecond))
		ev := inboxtest.NewEvents(t)
		svc, _, stop := registered(t, b, 50*time.Millisecond, func(context.Context, Job) error { return nil }, inbox.Workers(3), ev.Observe())
		op := inbox.NewOperator(b)
		insts, err := op.Instances(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(insts) != 1 || !insts[0].Alive || insts[0].ID != svc.InstanceID() || insts[0].Service != "invoices" || insts[0].PID != os.Getpid() {
			t.Fatalf("instances = %+v, want this one alive", insts)
		}
		subs := insts[0].Subscriptions
		if len(subs) != 1 || subs[0].Table != "jobs" || subs[0].Workers != 3 || subs[0].Form != "lease" || subs[0].Roles[inbox.RoleLockedUntil] != "locked_until" {
			t.Fatalf("subscriptions = %+v", subs)
		}
		insert(t, b.DB(), 5)
		ev.Wait("5 acks", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Acked) == 5 })
		stop()
		insts, err = op.Instances(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(insts) != 0 {
			t.Fatalf("instances after stop = %+v, want none", insts)
		}
		var handled int64
		if err := b.DB().QueryRow("SELECT COALESCE(SUM(handled), 0) FROM sqlinbox_queue_minutes WHERE table_name = 'jobs' AND outcome = 'acked'").Scan(&handled); err != nil {
			t.Fatal(err)
		}
		if handled != 5 {
			t.Fatalf("per-minute counts hold %d acked handlings, want 5", handled)
		}
	})
}

// A service whose registry tables are missing handles rows all the same.
func TestRegistryMissingTables(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		b := open(t, url, inbox.PollInterval(50*time.Millisecond))
		svc := inbox.NewService("invoices", "1", b)
		svc.Signals = false
		if err := svc.Register(); err != nil {
			t.Fatal(err)
		}
		ev := inboxtest.NewEvents(t)
		if _, err := inbox.Handle(svc, inbox.MustQueue[Job]("jobs"), func(context.Context, Job) error { return nil }, ev.Observe()); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- svc.Run(ctx) }()
		insert(t, b.DB(), 3)
		ev.Wait("3 acks", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Acked) == 3 })
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

// An instance killed without a stop stays in the registry and is shown as
// gone once its heartbeat is stale: the child is this test
// binary, run as a registered service in a process of its own.
func TestRegistryKilledGoesStale(t *testing.T) {
	if os.Getenv("INBOX_REGISTRY_CHILD") != "" {
		return // the parent runs the child through TestRegistryChild
	}
	eachDB(t, func(t *testing.T, url string) {
		if url[:9] == "sqlite://" {
			url = "sqlite://" + filepath.Join(t.TempDir(), "reg.db") // shared with the child
		}
		ctx := context.Background()
		b := open(t, url)
		if err := migrations.ApplyRegistry(ctx, b.DB()); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestRegistryChild$", "-test.v")
		cmd.Env = append(os.Environ(), "INBOX_REGISTRY_CHILD="+url)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		lines := bufio.NewScanner(out)
		for lines.Scan() && lines.Text() != "child started" {
		}
		op := inbox.NewOperator(b)
		alive := func() (n, gone int) {
			insts, err := op.Instances(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, in := range insts {
				if in.Alive {
					n++
				} else {
					gone++
				}
			}
			return n, gone
		}
		if n, _ := alive(); n != 1 {
			t.Fatalf("%d instances alive with the child running, want 1", n)
		}
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		killed := time.Now()
		eventually(t, "the killed instance shown as gone", func() bool { n, gone := alive(); return n == 0 && gone == 1 })
		t.Logf("the killed instance (heartbeat 100ms, gone after 5s) shown as gone %v after the kill", time.Since(killed).Round(time.Millisecond))
	})
}

// TestRegistryChild is the child process of TestRegistryKilledGoesStale.
func TestRegistryChild(t *testing.T) {
	url := os.Getenv("INBOX_REGISTRY_CHILD")
	if url == "" {
		return // runs only as the child of TestRegistryKilledGoesStale
	}
	b, err := inbox.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	if err := migrations.Apply(context.Background(), b.DB(), "jobs"); err != nil {
		t.Fatal(err)
	}
	registered(t, b, 100*time.Millisecond, func(context.Context, Job) error { return nil })
	fmt.Println("child started")
	select {} // until killed
}

// A paused queue claims nothing while running handlers finish; a service
// that starts meanwhile starts paused; a resume makes both claim at once.
// On Postgres the pause travels by NOTIFY: the heartbeat is a minute, and
// the service has a hub of its own, so nothing else can tell it in time.
func TestPauseResume(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		ctx := context.Background()
		every, opts := 50*time.Millisecond, []inbox.Option{inbox.PollInterval(50 * time.Millisecond)}
		if len(url) > 11 && url[:11] == "postgres://" { // MySQL has no NOTIFY: its pause travels by heartbeat, as SQLite's
			every, opts = time.Minute, append(opts, inbox.ListenNotify(), inbox.WithHub(notify.NewHub()))
		}
		b := open(t, url, opts...)
		started, release := make(chan int64, 10), make(chan struct{})
		ev := inboxtest.NewEvents(t)
		svc, sub, _ := registered(t, b, every, func(ctx context.Context, j Job) error {
			started <- j.ID
			<-release
			return nil
		}, inbox.Workers(2), ev.Observe())
		if b.Listener() != nil {
			<-b.Listener().Ready()
		}
		insert(t, b.DB(), 1)
		receiveN(t, started, 1, "the first handler")

		op := inbox.NewOperator(open(t, url))
		t0 := time.Now()
		if err := op.Pause(ctx, "jobs", ""); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the pause seen", func() bool { return svc.Paused("jobs", "") })
		t.Logf("pause seen %v after Pause returned (heartbeat %v)", time.Since(t0).Round(time.Millisecond), every)

		// A second instance starts paused.
		b2 := open(t, url, opts...)
		svc2, sub2, _ := registered(t, b2, every, func(ctx context.Context, j Job) error {
			started <- j.ID
			return nil
		}, ev.Observe())
		if !svc2.Paused("jobs", "") {
			t.Fatal("an instance that started during the pause is not paused")
		}

		insert(t, b.DB(), 4)
		close(release) // the running handler finishes
		ev.Wait("the running handler's ack", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Acked) == 1 })
		// Each subscription tries to claim several times (the poll, and the
		// wakes of the inserts) and gets nothing.
		c1, c2 := sub.Stats().Claims, sub2.Stats().Claims
		b.Wake("jobs", "")
		b2.Wake("jobs", "")
		eventually(t, "claims tried while paused", func() bool {
			return sub.Stats().Claims >= c1+1 && sub2.Stats().Claims >= c2+1
		})
		if n := len(started); n != 0 {
			t.Fatalf("%d rows started while paused", n)
		}
		st, err := op.State(ctx, inbox.QueueRef{Table: "jobs"})
		if err != nil {
			t.Fatal(err)
		}
		if st.Available != 4 {
			t.Fatalf("state while paused = %+v, want 4 available", st)
		}

		t1 := time.Now()
		if err := op.Resume(ctx, "jobs", ""); err != nil {
			t.Fatal(err)
		}
		ev.Wait("the 4 rows handled after resume", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Acked) == 5 })
		t.Logf("4 rows handled %v after Resume returned", time.Since(t1).Round(time.Millisecond))
	})
}

// An instance dead for longer than Keep is forgotten when another joins.
func TestRegistryForgetsTheLongDead(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		ctx := context.Background()
		b := open(t, url, inbox.PollInterval(50*time.Millisecond))
		if err := migrations.ApplyRegistry(ctx, b.DB()); err != nil {
			t.Fatal(err)
		}
		old := time.Now().Add(-25 * time.Hour).UnixMilli()
		if _, err := b.DB().Exec(sqlFor(b, "INSERT INTO sqlinbox_instances (id, service, version, host, pid, started_at, heartbeat_at, every_ms) VALUES ('dead', 'invoices', '1', 'h', 1, $1, $2, 1000)"), old, old); err != nil {
			t.Fatal(err)
		}
		if _, err := b.DB().Exec("INSERT INTO sqlinbox_subscriptions (instance, position, name, table_name, group_name, form, workers, lease_ms, roles) VALUES ('dead', 0, 'jobs', 'jobs', '', 'lease', 1, 30000, '{}')"); err != nil {
			t.Fatal(err)
		}
		svc, _, _ := registered(t, b, 50*time.Millisecond, func(context.Context, Job) error { return nil })
		insts, err := inbox.NewOperator(b).Instances(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(insts) != 1 || insts[0].ID != svc.InstanceID() {
			t.Fatalf("instances = %+v, want only the new one", insts)
		}
		var subs int
		if err := b.DB().QueryRow("SELECT count(*) FROM sqlinbox_subscriptions WHERE instance = 'dead'").Scan(&subs); err != nil {
			t.Fatal(err)
		}
		if subs != 0 {
			t.Fatalf("%d subscriptions of the dead instance left", subs)
		}
	})
}
