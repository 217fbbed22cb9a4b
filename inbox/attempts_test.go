package inbox_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sqlinbox/sqlinbox/claim/advisory"
	"github.com/sqlinbox/sqlinbox/claim/lease"
	"github.com/sqlinbox/sqlinbox/claim/rowlock"
	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/internal/claim"
)

// A row claimed MaxAttempts times without a settlement (each handling's
// process died) is parked at its next claim, without running its handler:
// attempts are counted when a row is claimed. Every form, every database.
func TestRowThatKillsItsProcessIsParked(t *testing.T) {
	cases := []struct {
		form claim.Form
		db   string
	}{{lease.Form, "sqlite"}, {lease.Form, "postgres"}, {lease.Form, "mysql"}, {rowlock.Form, "postgres"}, {rowlock.Form, "mysql"},
		{advisory.Form, "postgres"}, {advisory.Form, "mysql"}}
	for _, c := range cases {
		t.Run(c.form.Name()+"/"+c.db, func(t *testing.T) {
			t.Parallel()
			var url string
			switch c.db {
			case "sqlite":
				url = inboxtest.SQLite(t)
			case "postgres":
				url = inboxtest.Postgres(t)
			default:
				url = inboxtest.MySQL(t)
			}
			b := open(t, url, inbox.WithClock(fake()))
			table := ownTable(t, b)
			// Claimed three times already, never settled.
			if _, err := b.DB().Exec("INSERT INTO " + table + " (payload, attempts) VALUES ('p', 3)"); err != nil {
				t.Fatal(err)
			}
			insertInto(t, b.DB(), table, 1)
			ev := inboxtest.NewEvents(t)
			var ran atomic.Int32
			sub, err := inbox.Subscribe(b, inbox.MustQueue[Job](table), func(ctx context.Context, j Job) error {
				if j.Attempts != 1 {
					t.Errorf("handler ran on row %d at attempt %d", j.ID, j.Attempts)
				}
				ran.Add(1)
				return nil
			}, inbox.Form(c.form), inbox.MaxAttempts(3), ev.Observe())
			if err != nil {
				t.Fatal(err)
			}
			inboxtest.RunSubscription(t, sub)
			evs := ev.Wait("a park and an ack", func(e []inbox.Event) bool { return len(e) == 2 })
			var parked inbox.Event
			for _, e := range evs {
				if e.Outcome == inbox.Parked {
					parked = e
				}
			}
			if parked.Attempt != 4 || parked.Err == nil || !strings.Contains(parked.Err.Error(), "claimed 4 times") {
				t.Fatalf("events %+v, want the over-claimed row parked at attempt 4", evs)
			}
			if n := ran.Load(); n != 1 {
				t.Fatalf("handler ran %d times, want once (the fresh row only)", n)
			}
			rows := inboxtest.ParkedRows(t, b, inbox.MustQueue[Job](table))
			if len(rows) != 1 || rows[0].Attempts != 4 {
				t.Fatalf("parked rows %v, want one with attempts 4", rows)
			}
		})
	}
}
