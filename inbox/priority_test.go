package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/claim/advisory"
	"github.com/sqlinbox/sqlinbox/claim/lease"
	"github.com/sqlinbox/sqlinbox/claim/rowlock"
	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/internal/claim"
)

// Urgent is a row of a table with priorities.
type Urgent struct {
	ID          int64      `db:"id" inbox:"id,generated"`
	LockedUntil *time.Time `db:"locked_until" inbox:"locked_until"`
	Payload     []byte     `db:"payload" inbox:"payload"`
	Priority    int16      `db:"priority" inbox:"priority"`
}

// openPriority opens a broker on the reference table with a priority
// column, and its index unless bare.
func openPriority(t *testing.T, url string, withIndex bool, opts ...inbox.Option) *inbox.Broker {
	t.Helper()
	b := open(t, url, opts...)
	ddl := []string{"ALTER TABLE jobs ADD COLUMN priority smallint NOT NULL DEFAULT 0"}
	if withIndex {
		ddl = append(ddl, "CREATE INDEX jobs_priority_id ON jobs (priority, id)")
	}
	for _, q := range ddl {
		if _, err := b.DB().Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// Claims take rows by priority, then id, on every form. One worker claims one row at a time, and the poll is an hour:
// a claim that resumed at the last id it took (as claims without
// priorities do) would pass over the rows of later priorities with smaller
// ids, and the drain would stall.
func TestPriorityOrder(t *testing.T) {
	forms := []struct {
		name string
		form claim.Form
		pg   bool
	}{{"lease", lease.Form, false}, {"rowlock", rowlock.Form, true}, {"advisory", advisory.Form, true}}
	for _, f := range forms {
		t.Run(f.name, func(t *testing.T) {
			eachDB(t, func(t *testing.T, url string) {
				if f.pg && strings.HasPrefix(url, "sqlite") {
					t.Skip("not on SQLite") // the form refuses SQLite at subscribe
				}
				b := openPriority(t, url, true, inbox.PollInterval(time.Hour))
				q := inbox.MustQueue[Urgent]("jobs")
				var rows []Urgent
				for i := range 40 {
					rows = append(rows, Urgent{Payload: fmt.Appendf(nil, "%d", i), Priority: int16([]int{5, 0, 3, 0, 9, 1, 3, 5}[i%8])})
				}
				if _, err := inbox.PublishMany(context.Background(), b, q, rows); err != nil {
					t.Fatal(err)
				}
				var mu sync.Mutex
				var got []Urgent
				done := make(chan struct{}, len(rows))
				sub, err := inbox.Subscribe(b, q, func(_ context.Context, u Urgent) error {
					mu.Lock()
					got = append(got, u)
					mu.Unlock()
					done <- struct{}{}
					return nil
				}, inbox.Workers(1), inbox.Form(f.form))
				if err != nil {
					t.Fatal(err)
				}
				inboxtest.RunSubscription(t, sub)
				receiveN(t, done, len(rows), "rows handled")
				mu.Lock()
				defer mu.Unlock()
				if !slices.IsSortedFunc(got, func(a, b Urgent) int {
					if a.Priority != b.Priority {
						return int(a.Priority) - int(b.Priority)
					}
					return int(a.ID - b.ID)
				}) {
					order := make([]string, len(got))
					for i, u := range got {
						order[i] = fmt.Sprintf("%d/%d", u.Priority, u.ID)
					}
					t.Fatalf("handled out of (priority, id) order: %s", strings.Join(order, " "))
				}
			})
		})
	}
}

// A priority without its index is refused with the DDL.
func TestPriorityRefusals(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		b := openPriority(t, url, false)
		run := func(q inbox.Queue[Urgent], opts ...inbox.SubOption) error {
			sub, err := inbox.Subscribe(b, q, func(context.Context, Urgent) error { return nil }, opts...)
			if err != nil {
				return err
			}
			return sub.Run(ctx)
		}
		err := run(inbox.MustQueue[Urgent]("jobs"))
		var te *inbox.TableError
		if !errors.As(err, &te) || te.Column != "priority" || !strings.Contains(err.Error(), quotedFor(b, `CREATE INDEX "jobs_priority_id" ON "jobs" ("priority", "id")`)) {
			t.Fatalf("Run = %v, want a TableError asking for the index", err)
		}
	})
}

// A priority column that may hold NULL is refused (Postgres sorts NULLs
// last, SQLite first), with a fix that runs as printed: NULLs become 0, and
// the column's own default stays (0 where it had none).
func TestNullablePriorityRefused(t *testing.T) {
	for _, c := range []struct {
		name, decl string
		dflt       int
	}{{"no default", "smallint", 0}, {"default 2", "smallint DEFAULT 2", 2}} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			eachDB(t, func(t *testing.T, url string) {
				b := open(t, url)
				for _, q := range []string{
					"ALTER TABLE jobs ADD COLUMN priority " + c.decl,
					"CREATE INDEX jobs_priority_id ON jobs (priority, id)",
					"INSERT INTO jobs (payload, priority) VALUES ('null', NULL), ('one', 1)",
				} {
					if _, err := b.DB().Exec(q); err != nil {
						t.Fatal(err)
					}
				}
				q := inbox.MustQueue[Urgent]("jobs")
				err := checkOnce(t, b, q)
				var te *inbox.TableError
				if !errors.As(err, &te) || te.Column != "priority" || !strings.Contains(te.Problem, "NOT NULL") {
					t.Fatalf("check = %v, want a TableError on priority asking for NOT NULL", err)
				}
				runEveryFix(t, b, q, te)
				if _, err := b.DB().Exec("INSERT INTO jobs (payload) VALUES ('default')"); err != nil {
					t.Fatal(err)
				}
				got := map[string]int{}
				rows, err := b.DB().Query("SELECT payload, priority FROM jobs")
				if err != nil {
					t.Fatal(err)
				}
				defer rows.Close()
				for rows.Next() {
					var p string
					var n int
					if err := rows.Scan(&p, &n); err != nil {
						t.Fatal(err)
					}
					got[p] = n
				}
				if want := map[string]int{"null": 0, "one": 1, "default": c.dflt}; fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("priorities after the fix %v, want %v (fix: %s)", got, want, te.Fix)
				}
			})
		})
	}
}
