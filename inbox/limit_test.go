package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
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
	"github.com/sqlinbox/sqlinbox/migrations"
)

// KeyedJob is Job with the key column the limit tests limit.
type KeyedJob struct {
	ID          int64      `db:"id" inbox:"id,generated"`
	LockedUntil *time.Time `db:"locked_until" inbox:"locked_until"`
	Payload     []byte     `db:"payload" inbox:"payload"`
	Attempts    int        `db:"attempts" inbox:"attempts"`
	Customer    string     `db:"customer"`
}

// limitCases are the forms and databases a limit serves.
var limitCases = []struct {
	form claim.Form
	db   string
}{{lease.Form, "sqlite"}, {lease.Form, "postgres"}, {lease.Form, "mysql"}, {rowlock.Form, "postgres"}, {rowlock.Form, "mysql"},
	{advisory.Form, "postgres"}, {advisory.Form, "mysql"}}

func eachLimitCase(t *testing.T, f func(t *testing.T, form claim.Form, url string)) {
	for _, c := range limitCases {
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
			f(t, c.form, url)
		})
	}
}

// keyedTable makes a table of its own with a customer column, and the slot
// table.
func keyedTable(t *testing.T, b *inbox.Broker) string {
	t.Helper()
	table := ownTable(t, b)
	if _, err := b.DB().Exec("ALTER TABLE " + table + " ADD COLUMN customer VARCHAR(64)"); err != nil {
		t.Fatal(err)
	}
	if err := migrations.ApplyLimits(context.Background(), b.DB()); err != nil {
		t.Fatal(err)
	}
	return table
}

func insertKeyed(t *testing.T, db *sql.DB, table string, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, err := db.Exec("INSERT INTO "+table+" (payload, customer) VALUES ('p', "+param(db, 1)+")", k); err != nil {
			t.Fatal(err)
		}
	}
}

// param is placeholder n of db's driver.
func param(db *sql.DB, n int) string {
	switch fmt.Sprintf("%T", db.Driver()) {
	case "*stdlib.Driver":
		return fmt.Sprintf("$%d", n)
	}
	return "?"
}

// inWork records handlings per key from handler start to end.
type inWork struct {
	t       *testing.T
	max     int
	mu      sync.Mutex
	now     map[string]int
	peak    map[string]int
	started int
}

func newInWork(t *testing.T, max int) *inWork {
	return &inWork{t: t, max: max, now: map[string]int{}, peak: map[string]int{}}
}

func (w *inWork) start(ctx context.Context, key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.now[key]++
	w.started++
	w.peak[key] = max(w.peak[key], w.now[key])
	if w.now[key] > w.max {
		w.t.Errorf("%d rows of key %q in work at once, limit %d", w.now[key], key, w.max)
	}
	s, ok := inbox.SlotFrom(ctx)
	if !ok || s.Key != key || s.Slot < 0 || s.Slot >= w.max || s.Fence <= 0 {
		w.t.Errorf("handler of key %q holds slot %+v (%v), want one of that key below %d", key, s, ok, w.max)
	}
}

func (w *inWork) end(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.now[key]--
}

// Two instances of 6 workers each drain 60 rows over 6 keys with a limit
// of 2: never more than 2 of a key in work, every row handled once at its
// first attempt (a row that waited used none), the slots all freed.
func TestLimitCapsRowsInWorkPerKey(t *testing.T) {
	eachLimitCase(t, func(t *testing.T, form claim.Form, url string) {
		var all []string
		for range 10 {
			all = append(all, "a", "b", "c", "d", "e", "f")
		}
		drainLimited(t, form, url, all, 6, 2, 5*time.Millisecond)
	})
}

// drainLimited drains rows of keys with two instances of workers each,
// under a limit of n per key, handlers working work: never more than n of a
// key in work, every row handled once at its first attempt, the slots all
// freed.
func drainLimited(t *testing.T, form claim.Form, url string, keys []string, workers, n int, work time.Duration) {
	b := open(t, url, inbox.PollInterval(200*time.Millisecond))
	table := keyedTable(t, b)
	b2 := open(t, url, inbox.PollInterval(200*time.Millisecond))
	insertKeyed(t, b.DB(), table, keys...)
	w := newInWork(t, n)
	ev := inboxtest.NewEvents(t)
	handle := func(ctx context.Context, j KeyedJob) error {
		w.start(ctx, j.Customer)
		defer w.end(j.Customer)
		if j.Attempts != 1 {
			t.Errorf("row %d handled at attempt %d, want 1", j.ID, j.Attempts)
		}
		time.Sleep(work) // the handler's work
		return nil
	}
	for _, br := range []*inbox.Broker{b, b2} {
		sub, err := inbox.Subscribe(br, inbox.MustQueue[KeyedJob](table), handle, inbox.Form(form), inbox.Workers(workers),
			inbox.Limit("customer", n), ev.Observe())
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
	}
	want := len(keys)
	evs := ev.Wait(fmt.Sprintf("%d acks", want), func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Acked) == want })
	if len(evs) != want {
		t.Fatalf("%d events, want %d acks and nothing else: %v", len(evs), want, evs)
	}
	w.mu.Lock()
	t.Logf("peak in work per key: %v", w.peak)
	w.mu.Unlock()
	if n := rowsOf(t, b.DB(), table); n != 0 {
		t.Fatalf("%d rows left", n)
	}
	eventually(t, "the slots freed", func() bool { return rowsOf(t, b.DB(), "sqlinbox_limit_slots WHERE holder <> ''") == 0 })
}

func rowsOf(t *testing.T, db *sql.DB, table string) int {
	t.Helper()
	var n int
	if err := db.QueryRow("SELECT count(*) FROM " + table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A limit above a subscription's workers lets its claims take spare rows
// (claimed beyond the free workers, waiting in the process), each holding
// its slot, never more than the limit in a claim: two instances of 2
// workers each, limit 3, one key value: never more than 3 in work at once
// (4 workers could be), every row at its first attempt, the slots freed.
func TestLimitAboveWorkersSpareRowsHoldSlots(t *testing.T) {
	eachLimitCase(t, func(t *testing.T, form claim.Form, url string) {
		var all []string
		for range 40 {
			all = append(all, "a")
		}
		drainLimited(t, form, url, all, 2, 3, 2*time.Millisecond)
	})
}

// With a limit of 1 and a poll far off, the next row of a key starts as
// soon as the one in work is acked: the slot's release wakes the claim.
func TestLimitReleaseWakesNextRow(t *testing.T) {
	eachLimitCase(t, func(t *testing.T, form claim.Form, url string) {
		b := open(t, url, inbox.PollInterval(time.Minute))
		table := keyedTable(t, b)
		insertKeyed(t, b.DB(), table, "a", "a")
		started := make(chan int64, 2)
		release := make(chan struct{})
		sub, err := inbox.Subscribe(b, inbox.MustQueue[KeyedJob](table), func(ctx context.Context, j KeyedJob) error {
			started <- j.ID
			if j.Attempts != 1 {
				t.Errorf("row %d handled at attempt %d, want 1", j.ID, j.Attempts)
			}
			<-release
			return nil
		}, inbox.Form(form), inbox.Workers(4), inbox.Limit("customer", 1))
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
		receiveN(t, started, 1, "first row started")
		// The other row waits with no attempt used (a claim that took it
		// beside the first gave it back with its attempt).
		eventually(t, "the waiting row at attempt 0", func() bool {
			var n int
			if err := b.DB().QueryRow("SELECT count(*) FROM " + table + " WHERE attempts = 0").Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n == 1
		})
		select {
		case id := <-started:
			t.Fatalf("row %d started beside the first; limit 1", id)
		default:
		}
		at := time.Now()
		release <- struct{}{}
		select {
		case <-started:
		case <-time.After(20 * time.Second):
			var slots, held int
			_ = b.DB().QueryRow("SELECT count(*), count(NULLIF(holder, '')) FROM sqlinbox_limit_slots").Scan(&slots, &held)
			var lu sql.NullString
			var att int
			_ = b.DB().QueryRow("SELECT CAST(locked_until AS TEXT), attempts FROM "+table).Scan(&lu, &att)
			t.Fatalf("the second row did not start within 20s of the first's ack (poll: 1m); stats %+v, %d rows (locked_until %v, attempts %d), slot rows %d, held %d", sub.Stats(), rowsOf(t, b.DB(), table), lu, att, slots, held)
		}
		took := time.Since(at)
		t.Logf("ack to next row's start: %v (poll 1m)", took)
		if took > 10*time.Second {
			t.Fatalf("next row started %v after the ack; want well under the poll", took)
		}
		close(release)
	})
}

// A holder that died keeps its slot until its hold's end, never less: the
// slot of a row a dead process held (written as that process left it)
// holds back the key's next row until its expiry has passed, then the next
// claim frees it.
func TestLimitDeadHoldersSlotFreesAtItsEnd(t *testing.T) {
	for _, db := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(db, func(t *testing.T) {
			t.Parallel()
			var url string
			switch db {
			case "sqlite":
				url = inboxtest.SQLite(t)
			case "postgres":
				url = inboxtest.Postgres(t)
			default:
				url = inboxtest.MySQL(t)
			}
			c := fake()
			b := open(t, url, inbox.WithClock(c))
			table := keyedTable(t, b)
			insertKeyed(t, b.DB(), table, "a", "b")
			// The dead holder's slot: its row's lease ends at epoch+30s.
			end := epoch.Add(30 * time.Second)
			if _, err := b.DB().Exec(fmt.Sprintf("INSERT INTO sqlinbox_limit_slots (limit_name, key_value, slot, holder, fence, expires_at, row_id) VALUES ('%s:customer', 'a', 0, 'dead', 1, %d, 999)",
				table, end.UnixMicro())); err != nil {
				t.Fatal(err)
			}
			started := make(chan string, 2)
			sub, err := inbox.Subscribe(b, inbox.MustQueue[KeyedJob](table), func(ctx context.Context, j KeyedJob) error {
				started <- j.Customer
				return nil
			}, inbox.Workers(2), inbox.Limit("customer", 1))
			if err != nil {
				t.Fatal(err)
			}
			inboxtest.RunSubscription(t, sub)
			if k := <-started; k != "b" {
				t.Fatalf("key %q started first; a's slot is held", k)
			}
			for _, step := range []time.Duration{10 * time.Second, 19 * time.Second} {
				inboxtest.Idle(t, sub)
				c.Advance(step)
				inboxtest.Idle(t, sub)
				select {
				case k := <-started:
					t.Fatalf("key %q started at %v, before the dead holder's hold ended at %v", k, c.Now().Sub(epoch), end.Sub(epoch))
				default:
				}
			}
			inboxtest.Idle(t, sub)
			c.Advance(2 * time.Second) // past the end, and a poll
			select {
			case k := <-started:
				if k != "a" {
					t.Fatalf("key %q started", k)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("key a's row did not start within 20s after the dead holder's slot expired")
			}
		})
	}
}

// Bad limits are refused at Subscribe; a column the table lacks, and a
// missing slot table, at Run, naming what to do.
func TestLimitRefusals(t *testing.T) {
	b := open(t, inboxtest.SQLite(t))
	q := inbox.MustQueue[Job]("jobs")
	h := func(context.Context, Job) error { return nil }
	for _, o := range [][]inbox.SubOption{{inbox.Limit("customer", 0)}, {inbox.Limit("", 1)}, {inbox.SharedLimit("bad name", "customer", 1)},
		{inbox.Limit("customer", 1), inbox.FairBy("customer")}} {
		if _, err := inbox.Subscribe(b, q, h, o...); !errors.Is(err, inbox.ErrInvalid) {
			t.Errorf("Subscribe: %v, want ErrInvalid", err)
		}
	}
	sub, err := inbox.Subscribe(b, q, h, inbox.Limit("customer", 1))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = sub.Run(ctx)
	var te *inbox.TableError
	if !errors.As(err, &te) || te.Column != "customer" || !strings.Contains(err.Error(), "ADD COLUMN") {
		t.Fatalf("Run: %v, want a TableError naming column customer and its fix", err)
	}
	if _, err := b.DB().Exec("ALTER TABLE jobs ADD COLUMN customer TEXT"); err != nil {
		t.Fatal(err)
	}
	sub, err = inbox.Subscribe(b, q, h, inbox.Limit("customer", 1))
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Run(ctx); err == nil || !strings.Contains(err.Error(), "migrations.ApplyLimits") {
		t.Fatalf("Run without the slot table: %v, want an error naming migrations.ApplyLimits", err)
	}
}
