package main

import (
	"context"
	"strings"
	"testing"

	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/schedule"
)

// schedule set-placement writes the override every instance reads, and
// reset-placement removes it, on every database the registry lives on; a
// placement that is none of the three is refused by name.
func TestSchedulePlacementCommands(t *testing.T) {
	each := func(name string, url func(testing.TB) string) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			u := url(t)
			ctx := context.Background()
			db := inboxtest.Open(t, u) // keeps a memory database alive between commands
			if err := db.PingContext(ctx); err != nil {
				t.Fatal(err)
			}
			inboxCmd(t, "migrate-registry", "--db", u)
			out := inboxCmd(t, "schedule", "set-placement", "--db", u, "--schedule", "pack_orders", "--placement", "every-instance")
			if !strings.Contains(out, "pack_orders runs every-instance") {
				t.Errorf("set-placement printed %q", out)
			}
			over, err := schedule.Overrides(ctx, db)
			if err != nil || over["pack_orders"].Placement != schedule.EveryInstance {
				t.Fatalf("overrides after set-placement: %v, %v; want pack_orders every-instance", over, err)
			}
			inboxCmd(t, "schedule", "set-placement", "--db", u, "--schedule", "pack_orders", "--placement", "every-worker")
			if over, err = schedule.Overrides(ctx, db); err != nil || len(over) != 1 || over["pack_orders"].Placement != schedule.EveryWorker {
				t.Fatalf("overrides after a second set-placement: %v, %v; want pack_orders every-worker alone", over, err)
			}
			root := newRoot()
			root.SetArgs([]string{"schedule", "set-placement", "--db", u, "--schedule", "pack_orders", "--placement", "everywhere"})
			root.SetOut(new(strings.Builder))
			if err := root.ExecuteContext(ctx); err == nil || !strings.Contains(err.Error(), `"everywhere"`) {
				t.Errorf("set-placement everywhere: %v, want it refused by name", err)
			}
			out = inboxCmd(t, "schedule", "reset-placement", "--db", u, "--schedule", "pack_orders")
			if !strings.Contains(out, "runs as its code places it") {
				t.Errorf("reset-placement printed %q", out)
			}
			if over, err = schedule.Overrides(ctx, db); err != nil || len(over) != 0 {
				t.Fatalf("overrides after reset-placement: %v, %v; want none", over, err)
			}
		})
	}
	each("sqlite", inboxtest.SQLite)
	each("postgres", inboxtest.Postgres)
	each("mysql", inboxtest.MySQL)
}
