package main

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// A row in work canceled by the command has its handler's context end with
// inbox.ErrCanceled and is parked with the reason as its last error; a row
// not in work is deleted at once with --delete.
func TestCancelCommand(t *testing.T) {
	everyDB(t, func(t *testing.T, url string) {
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
		started, causes := make(chan int64, 1), make(chan error, 1)
		if _, err := inbox.Handle(svc, inbox.MustQueue[job]("jobs"), func(ctx context.Context, j job) error {
			started <- j.ID
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return ctx.Err()
		}); err != nil {
			t.Fatal(err)
		}
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- svc.Run(rctx) }()
		t.Cleanup(func() {
			stop()
			if err := <-done; err != nil {
				t.Error(err)
			}
		})
		<-svc.Started()

		var id int64
		if err := b.DB().QueryRow("INSERT INTO jobs (payload) VALUES ('p') RETURNING id").Scan(&id); err != nil {
			t.Fatal(err)
		}
		if got := receive(t, started, "the handler to start"); got != id {
			t.Fatalf("handler started on row %d, want %d", got, id)
		}
		out := inboxCmd(t, "cancel", "--db", url, "--table", "jobs", "--id", strconv.FormatInt(id, 10), "--reason", "customer left")
		if !strings.Contains(out, "canceled 1 in work") {
			t.Fatalf("cancel printed %q", out)
		}
		select {
		case cause := <-causes:
			if !errors.Is(cause, inbox.ErrCanceled) {
				t.Fatalf("handler's context ended with %v, want inbox.ErrCanceled", cause)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the handler's context never ended")
		}
		var row rowJSON
		for deadline := time.Now().Add(30 * time.Second); row.State != "parked"; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("row %d not parked after its cancel: %+v", id, row)
			}
			if err := json.Unmarshal([]byte(inboxCmd(t, "row", "--db", url, "--table", "jobs", "--id", strconv.FormatInt(id, 10), "--json")), &row); err != nil {
				t.Fatal(err)
			}
		}
		if row.LastError == nil || *row.LastError != "inbox: canceled by an operator: customer left" {
			t.Fatalf("parked row's last error = %v", row.LastError)
		}

		var c cancelJSON
		if err := json.Unmarshal([]byte(inboxCmd(t, "cancel", "--db", url, "--table", "jobs", "--id", strconv.FormatInt(id, 10)+",999999", "--delete", "--json")), &c); err != nil {
			t.Fatal(err)
		}
		if c.Changed != 1 || c.InWork != 0 || !c.Deleted || len(c.Missing) != 1 || c.Missing[0] != 999999 {
			t.Fatalf("cancel --delete of a parked row = %+v", c)
		}
	})
}
