package inbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
)

// Invoice is a row of a table with keys.
type Invoice struct {
	ID          int64      `db:"id" inbox:"id,generated"`
	LockedUntil *time.Time `db:"locked_until" inbox:"locked_until"`
	Payload     []byte     `db:"payload" inbox:"payload"`
	Key         string     `db:"invoice_key" inbox:"key"`
}

// openKeyed opens a broker on the reference table with a key column, and
// with its unique index unless bare.
func openKeyed(t *testing.T, url string, withIndex bool, opts ...inbox.Option) *inbox.Broker {
	t.Helper()
	b := open(t, url, opts...)
	ddl := []string{"ALTER TABLE jobs ADD COLUMN invoice_key text"}
	if b.Dialect() == "mysql" { // a unique index takes no TEXT whole
		ddl[0] = "ALTER TABLE jobs ADD COLUMN invoice_key VARCHAR(255)"
	}
	if withIndex {
		ddl = append(ddl, "CREATE UNIQUE INDEX jobs_invoice_key ON jobs (invoice_key)")
	}
	for _, q := range ddl {
		if _, err := b.DB().Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// A key without a unique index is refused with the DDL that adds it.
func TestKeyNeedsUniqueIndex(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		b := openKeyed(t, url, false)
		sub, err := inbox.Subscribe(b, inbox.MustQueue[Invoice]("jobs"), func(context.Context, Invoice) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = sub.Run(ctx)
		var te *inbox.TableError
		if !errors.As(err, &te) || te.Column != "invoice_key" || !strings.Contains(err.Error(), quotedFor(b, `CREATE UNIQUE INDEX "jobs_invoice_key" ON "jobs" ("invoice_key")`)) {
			t.Fatalf("Run = %v, want a TableError asking for the unique index", err)
		}
	})
}

// A publish whose key is queued writes nothing and returns the queued
// row's id with ErrDuplicate; once that row is acked, the key is free.
// Rows without a key never collide.
func TestPublishKey(t *testing.T) {
	eachPublishDB(t, func(t *testing.T, url string) {
		for _, notify := range []bool{false, true} {
			if notify && !strings.HasPrefix(url, "postgres") {
				continue
			}
			var opts []inbox.Option
			if notify {
				opts = append(opts, inbox.ListenNotify())
			}
			b := openKeyed(t, url, true, opts...)
			q := inbox.MustQueue[Invoice]("jobs")
			ctx := context.Background()
			first, err := inbox.Publish(ctx, b, q, Invoice{Payload: []byte("a"), Key: "inv-1"})
			if err != nil {
				t.Fatal(err)
			}
			again, err := inbox.Publish(ctx, b, q, Invoice{Payload: []byte("b"), Key: "inv-1"})
			var dup *inbox.DuplicateError
			if !errors.Is(err, inbox.ErrDuplicate) || !errors.As(err, &dup) || again != first || dup.IDs[0] != first || dup.Keys[0] != "inv-1" {
				t.Fatalf("second publish of a key: id %d, %v; want id %d and ErrDuplicate", again, err, first)
			}
			tx, err := b.DB().Begin()
			if err != nil {
				t.Fatal(err)
			}
			inTx, err := inbox.PublishTx(ctx, b, tx, q, Invoice{Payload: []byte("c"), Key: "inv-1"})
			if !errors.Is(err, inbox.ErrDuplicate) || inTx != first {
				t.Fatalf("PublishTx of a queued key: id %d, %v", inTx, err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if _, err := inbox.Publish(ctx, b, q, Invoice{Payload: []byte("no key")}); err != nil {
					t.Fatalf("rows without a key collided: %v", err)
				}
			}
			if n := rowsIn(t, b); n != 3 {
				t.Fatalf("%d rows, want 3 (one keyed, two without)", n)
			}
			if _, err := b.DB().Exec("DELETE FROM jobs WHERE invoice_key = 'inv-1'"); err != nil { // the ack
				t.Fatal(err)
			}
			later, err := inbox.Publish(ctx, b, q, Invoice{Payload: []byte("d"), Key: "inv-1"})
			if err != nil || later == first {
				t.Fatalf("a key published after its row was acked: id %d (first %d), %v", later, first, err)
			}
			if _, err := b.DB().Exec("DROP TABLE jobs"); err != nil {
				t.Fatal(err)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// PublishMany on a table with keys writes each new key once, and returns
// the queued ids in the places of keys queued before or earlier in the
// batch, with ErrDuplicate.
func TestPublishManyKeys(t *testing.T) {
	eachPublishDB(t, func(t *testing.T, url string) {
		b := openKeyed(t, url, true)
		q := inbox.MustQueue[Invoice]("jobs")
		ctx := context.Background()
		old, err := inbox.Publish(ctx, b, q, Invoice{Payload: []byte("old"), Key: "k0"})
		if err != nil {
			t.Fatal(err)
		}
		rows := []Invoice{
			{Payload: []byte("1"), Key: "k1"},
			{Payload: []byte("2")},
			{Payload: []byte("3"), Key: "k0"},
			{Payload: []byte("4"), Key: "k1"},
			{Payload: []byte("5")},
			{Payload: []byte("6"), Key: "k2"},
		}
		ids, err := inbox.PublishMany(ctx, b, q, rows)
		var dup *inbox.DuplicateError
		if !errors.As(err, &dup) || !errors.Is(err, inbox.ErrDuplicate) {
			t.Fatalf("PublishMany with queued keys: %v, want a DuplicateError", err)
		}
		if strings.Join(dup.Keys, ",") != "k0,k1" {
			t.Fatalf("duplicate keys %v, want k0,k1", dup.Keys)
		}
		if ids[2] != old || ids[3] != ids[0] {
			t.Fatalf("ids %v: want the queued row's %d third and the first's fourth", ids, old)
		}
		want := map[int]string{0: "1", 1: "2", 2: "old", 4: "5", 5: "6"}
		for i, p := range want {
			var got string
			if err := b.DB().QueryRow(sqlFor(b, "SELECT payload FROM jobs WHERE id = $1"), ids[i]).Scan(&got); err != nil || got != p {
				t.Fatalf("ids[%d] = %d holds %q (%v), want %q", i, ids[i], got, err, p)
			}
		}
		if n := rowsIn(t, b); n != 5 {
			t.Fatalf("%d rows, want 5 (old, k1, k2 and two without a key)", n)
		}
	})
}

// Rows with and without a key are claimed into a string key field: no key
// reads as "".
func TestKeyedRowsHandled(t *testing.T) {
	eachPublishDB(t, func(t *testing.T, url string) {
		b := openKeyed(t, url, true)
		q := inbox.MustQueue[Invoice]("jobs")
		if _, err := inbox.PublishMany(context.Background(), b, q, []Invoice{{Payload: []byte("a"), Key: "k"}, {Payload: []byte("b")}}); err != nil {
			t.Fatal(err)
		}
		got := make(chan string, 2)
		sub, err := inbox.Subscribe(b, q, func(_ context.Context, inv Invoice) error {
			got <- string(inv.Payload) + "=" + inv.Key
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
		seen := map[string]bool{}
		for range 2 {
			select {
			case s := <-got:
				seen[s] = true
			case <-time.After(30 * time.Second):
				t.Fatalf("handled only %v", seen)
			}
		}
		if !seen["a=k"] || !seen["b="] {
			t.Fatalf("handled %v, want a=k and b=", seen)
		}
	})
}
