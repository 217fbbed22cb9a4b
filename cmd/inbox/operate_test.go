package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// job is the reference table's row, as the service under test handles it.
type job struct {
	ID          int64          `db:"id" inbox:"id,generated"`
	LockedUntil *time.Time     `db:"locked_until" inbox:"locked_until"`
	Payload     []byte         `db:"payload" inbox:"payload"`
	Group       string         `db:"group_name" inbox:"group"`
	Attempts    int            `db:"attempts" inbox:"attempts"`
	LastError   sql.NullString `db:"last_error" inbox:"last_error"`
}

// inboxCmd runs the command line with args and returns what it printed.
func inboxCmd(t *testing.T, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	root := newRoot()
	root.SetOut(&out)
	root.SetArgs(args)
	if err := root.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("inbox %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

func eachDB(t *testing.T, f func(t *testing.T, url string)) {
	t.Run("sqlite", func(t *testing.T) { t.Parallel(); f(t, inboxtest.SQLite(t)) })
	t.Run("postgres", func(t *testing.T) { t.Parallel(); f(t, inboxtest.Postgres(t)) })
}

// service runs a registered service with one subscription to jobs that
// sends each handled row's id on the returned channel.
func service(t *testing.T, url string) (*inbox.Service, *inbox.Subscription, chan int64, *sql.DB) {
	t.Helper()
	ctx := context.Background()
	b, err := inbox.Open(url, inbox.PollInterval(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if err := migrations.Apply(ctx, b.DB(), "jobs"); err != nil {
		t.Fatal(err)
	}
	inboxCmd(t, "migrate-registry", "--db", url)
	svc := inbox.NewService("invoices", "1.0.0", b)
	svc.Signals = false
	if err := svc.Register(inbox.RegistryHeartbeat(50 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	handled := make(chan int64, 100)
	sub, err := inbox.Handle(svc, inbox.MustQueue[job]("jobs"), func(_ context.Context, j job) error {
		handled <- j.ID
		return nil
	}, inbox.Workers(2))
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(rctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	<-svc.Started()
	return svc, sub, handled, b.DB()
}

func insertParked(t *testing.T, db *sql.DB, payload string) int64 {
	t.Helper()
	never := any("9999-12-31 00:00:00.000")
	var id int64
	if err := db.QueryRow("INSERT INTO jobs (payload, locked_until, attempts, last_error) VALUES ($1, $2, 25, 'render: template missing') RETURNING id",
		[]byte(payload), never).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

func receive(t *testing.T, ch chan int64, what string) int64 {
	t.Helper()
	select {
	case id := <-ch:
		return id
	case <-time.After(30 * time.Second):
		t.Fatalf("waited 30s for %s", what)
	}
	return 0
}

// A parked row, listed by rows and counted by queues, unparked by the
// command is handled by the running service; instances lists it.
func TestUnparkCommand(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		svc, _, handled, db := service(t, url)
		id := insertParked(t, db, `{"invoice": 7}`)

		out := inboxCmd(t, "rows", "--db", url, "--table", "jobs", "--state", "parked")
		if !strings.Contains(out, "parked") || !strings.Contains(out, "render: template missing") || !strings.Contains(out, `{"invoice": 7}`) {
			t.Fatalf("rows printed:\n%s", out)
		}
		var qs []queueJSON
		if err := json.Unmarshal([]byte(inboxCmd(t, "queues", "--db", url, "--json")), &qs); err != nil {
			t.Fatal(err)
		}
		if len(qs) != 1 || qs[0].Table != "jobs" || qs[0].Parked != 1 || qs[0].Instances != 1 || qs[0].Workers != 2 || qs[0].Paused {
			t.Fatalf("queues = %+v", qs)
		}
		var insts []instanceJSON
		if err := json.Unmarshal([]byte(inboxCmd(t, "instances", "--db", url, "--json")), &insts); err != nil {
			t.Fatal(err)
		}
		if len(insts) != 1 || insts[0].ID != svc.InstanceID() || !insts[0].Alive {
			t.Fatalf("instances = %+v", insts)
		}

		if out := inboxCmd(t, "unpark", "--db", url, "--table", "jobs", "--id", "999999"); !strings.Contains(out, "unparked 0 rows") {
			t.Fatalf("unpark of a missing id printed %q", out)
		}
		if out := inboxCmd(t, "unpark", "--db", url, "--table", "jobs", "--error-contains", "template"); !strings.Contains(out, "unparked 1 rows of jobs") {
			t.Fatalf("unpark printed %q", out)
		}
		if got := receive(t, handled, "the unparked row handled"); got != id {
			t.Fatalf("handled row %d, want %d", got, id)
		}
	})
}

// A queue paused by the command claims nothing until resumed.
func TestPauseCommand(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		svc, sub, handled, db := service(t, url)
		inboxCmd(t, "pause", "--db", url, "--table", "jobs")
		start := time.Now()
		for !svc.Paused("jobs", "") {
			if time.Since(start) > 30*time.Second {
				t.Fatal("the pause not seen within 30s")
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Logf("pause seen %v after the command returned (heartbeat 50ms)", time.Since(start).Round(time.Millisecond))
		if _, err := db.Exec("INSERT INTO jobs (payload) VALUES ('a'), ('b')"); err != nil {
			t.Fatal(err)
		}
		claims := sub.Stats().Claims
		for sub.Stats().Claims < claims+3 { // three polls, each claiming nothing
			time.Sleep(10 * time.Millisecond)
		}
		if n := len(handled); n != 0 {
			t.Fatalf("%d rows handled while paused", n)
		}
		if out := inboxCmd(t, "queues", "--db", url); !strings.Contains(out, "yes") {
			t.Fatalf("queues does not show the pause:\n%s", out)
		}
		t0 := time.Now()
		inboxCmd(t, "resume", "--db", url, "--table", "jobs")
		receive(t, handled, "a row after resume")
		receive(t, handled, "a row after resume")
		t.Logf("both rows handled %v after resume", time.Since(t0).Round(time.Millisecond))
	})
}
