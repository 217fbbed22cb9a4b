package inbox_test

import (
	"context"
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
)

// noted is a row type with a column the reference table lacks, added by
// the tests below; a NULL in it cannot be read into a string.
type noted struct {
	Job
	Note string `db:"note"`
}

// A row that cannot be read into the user's type fails on its own (retried,
// then parked with the scan error), in every form; the rows around it flow.
func TestUnreadableRowDoesNotStallTheQueue(t *testing.T) {
	forms := map[string][]claim.Form{"sqlite": {lease.Form}, "postgres": {lease.Form, rowlock.Form, advisory.Form}}
	eachDB(t, func(t *testing.T, url string) {
		for _, form := range forms[strings.SplitN(t.Name(), "/", 2)[1]] {
			t.Run(form.Name(), func(t *testing.T) {
				clk := fake()
				b := open(t, url, inbox.WithClock(clk))
				db := b.DB()
				// A fresh table for each form.
				if _, err := db.Exec("DROP TABLE jobs"); err != nil {
					t.Fatal(err)
				}
				if err := migrations.Apply(context.Background(), db, "jobs"); err != nil {
					t.Fatal(err)
				}
				if _, err := db.Exec("ALTER TABLE jobs ADD COLUMN note text"); err != nil {
					t.Fatal(err)
				}
				if _, err := db.Exec("INSERT INTO jobs (payload, note) VALUES ('bad', NULL)"); err != nil {
					t.Fatal(err)
				}
				for range 6 {
					if _, err := db.Exec("INSERT INTO jobs (payload, note) VALUES ('good', 'n')"); err != nil {
						t.Fatal(err)
					}
				}
				ev := inboxtest.NewEvents(t)
				sub, err := inbox.Subscribe(b, inbox.MustQueue[noted]("jobs"), func(ctx context.Context, n noted) error {
					if n.Note != "n" {
						t.Errorf("handler got row %d with note %q", n.ID, n.Note)
					}
					return nil
				}, inbox.Workers(4), inbox.Form(form), inbox.MaxAttempts(2), ev.Observe())
				if err != nil {
					t.Fatal(err)
				}
				inboxtest.RunSubscription(t, sub)
				ev.Wait("6 acks and a retry", func(e []inbox.Event) bool {
					return inboxtest.Count(e, inbox.Acked) == 6 && inboxtest.Count(e, inbox.Retried) == 1
				})
				inboxtest.Idle(t, sub)
				clk.Advance(time.Minute)
				evs := ev.Wait("the unreadable row parked", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Parked) == 1 })
				var last string
				if err := db.QueryRow("SELECT last_error FROM jobs").Scan(&last); err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(last, "cannot be read") || !strings.Contains(last, "note") && !strings.Contains(last, "Note") && !strings.Contains(last, "NULL") {
					t.Fatalf("last_error = %q; events %+v", last, evs)
				}
			})
		}
	})
}
