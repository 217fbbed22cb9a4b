package inbox_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"log/slog"
	"net/url"
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

// readOnlyLog signals each line that names code (a refusal as
// read-only: 25006 on Postgres, 1792 on MariaDB/MySQL).
type readOnlyLog struct {
	slog.Handler
	code    string
	refused chan struct{}
}

func (h readOnlyLog) Enabled(context.Context, slog.Level) bool { return true }
func (h readOnlyLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h readOnlyLog) WithGroup(string) slog.Handler            { return h }
func (h readOnlyLog) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if strings.Contains(a.Value.String(), h.code) {
			select {
			case h.refused <- struct{}{}:
			default:
			}
		}
		return true
	})
	return nil
}

// The service's sessions land on a node that is read-only (its role made
// so, then its sessions ended, as in a failover onto a standby), then the
// node takes writes again: the read-only sessions are dropped, not kept
// and retried forever, handling resumes within seconds of writes being
// possible, and every row is acked once.
func TestReadOnlyNodeThenWritable(t *testing.T) {
	base := inboxtest.Postgres(t)
	producer := open(t, base)
	var rb [4]byte
	_, _ = rand.Read(rb[:])
	role := "inbox_ro_" + hex.EncodeToString(rb[:])
	if _, err := producer.DB().Exec("CREATE ROLE " + role + " LOGIN SUPERUSER"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The role owns the table; the schema's drop after this takes it.
		_, _ = producer.DB().Exec("REASSIGN OWNED BY " + role + " TO CURRENT_USER")
		if _, err := producer.DB().Exec("DROP ROLE IF EXISTS " + role); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	svcURL, app := appURL(t, u.String())
	log := readOnlyLog{Handler: slog.DiscardHandler, code: "25006", refused: make(chan struct{}, 1)}
	b := open(t, svcURL, inbox.MaxConns(8), inbox.WithLogger(slog.New(log)))
	table := ownTable(t, b)
	ev := inboxtest.NewEvents(t)
	sub, err := inbox.Subscribe(b, inbox.MustQueue[Job](table), func(ctx context.Context, j Job) error { return nil },
		inbox.Form(rowlock.Form), inbox.Workers(4), ev.Observe())
	if err != nil {
		t.Fatal(err)
	}
	inboxtest.RunSubscription(t, sub)

	var mu sync.Mutex
	written := map[int64]time.Time{}
	stop := produceEvery10ms(t, producer, b, table, &mu, written)
	ev.Wait("rows flowing", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Acked) >= 20 })

	// Read-only: new sessions of the role are; the service's are ended.
	if _, err := producer.DB().Exec("ALTER ROLE " + role + " SET default_transaction_read_only = on"); err != nil {
		t.Fatal(err)
	}
	if _, err := producer.DB().Exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`, app); err != nil {
		t.Fatal(err)
	}
	select {
	case <-log.refused:
	case <-time.After(30 * time.Second):
		t.Fatal("no claim refused as read-only within 30s of the sessions turning read-only")
	}
	if _, err := producer.DB().Exec("ALTER ROLE " + role + " RESET default_transaction_read_only"); err != nil {
		t.Fatal(err)
	}
	writable := time.Now()
	evs := ev.Wait("a row written after writes were possible again acked", func(e []inbox.Event) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, x := range e {
			if x.Outcome == inbox.Acked && written[x.ID].After(writable) {
				return true
			}
		}
		return false
	})
	var resumed time.Duration
	mu.Lock()
	for _, x := range evs {
		if x.Outcome == inbox.Acked && written[x.ID].After(writable) {
			resumed = x.End.Sub(writable)
			break
		}
	}
	mu.Unlock()
	t.Logf("handling resumed %v after the node took writes again", resumed.Round(time.Millisecond))
	if resumed > 10*time.Second {
		t.Errorf("handling resumed %v after the node took writes again; want within a few seconds (fails past 10s)", resumed)
	}
	stop()
	eventually(t, "every row gone", func() bool {
		var n int
		return producer.DB().QueryRow("SELECT count(*) FROM "+table).Scan(&n) == nil && n == 0
	})
	acks := map[int64]int{}
	for _, x := range ev.All() {
		if x.Outcome == inbox.Acked {
			acks[x.ID]++
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for id := range written {
		if acks[id] != 1 {
			t.Errorf("row %d acked %d times, want once", id, acks[id])
		}
	}
}

// On MariaDB/MySQL every connection of the service's pool is made
// read-only (its session's transactions: a write is refused with 1792, as
// on a server with --read-only it is with 1290), as if the pool had landed
// on a replica: in every form the claims refused are taken for dead
// connections, which are dropped, not kept and retried forever; the new
// connections take writes, and every row is acked once.
func TestReadOnlySessionsDroppedOnMySQL(t *testing.T) {
	for _, f := range []claim.Form{lease.Form, rowlock.Form, advisory.Form} {
		t.Run(f.Name(), func(t *testing.T) {
			t.Parallel()
			base := inboxtest.MySQL(t)
			producer := open(t, base)
			log := readOnlyLog{Handler: slog.DiscardHandler, code: "1792", refused: make(chan struct{}, 1)}
			const conns = 4
			b := open(t, base, inbox.MaxConns(conns), inbox.WithLogger(slog.New(log)))
			table := ownTable(t, b)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			held := make([]*sql.Conn, conns)
			for i := range held {
				c, err := b.DB().Conn(ctx)
				if err != nil {
					t.Fatalf("take connection %d of %d: %v", i+1, conns, err)
				}
				if _, err := c.ExecContext(ctx, "SET SESSION TRANSACTION READ ONLY"); err != nil {
					t.Fatal(err)
				}
				held[i] = c
			}
			for _, c := range held {
				c.Close() // back to the pool, read-only
			}
			const n = 20
			insertInto(t, producer.DB(), table, n)
			ev := inboxtest.NewEvents(t)
			sub, err := inbox.Subscribe(b, inbox.MustQueue[Job](table), func(ctx context.Context, j Job) error { return nil },
				inbox.Form(f), inbox.Workers(2), ev.Observe())
			if err != nil {
				t.Fatal(err)
			}
			inboxtest.RunSubscription(t, sub)
			select {
			case <-log.refused:
			case <-time.After(30 * time.Second):
				t.Fatal("no statement refused as read-only (1792) within 30s")
			}
			ev.Wait("every row acked", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Acked) >= n })
			acks := map[int64]int{}
			for _, x := range ev.All() {
				if x.Outcome == inbox.Acked {
					acks[x.ID]++
				}
			}
			for id, k := range acks {
				if k != 1 {
					t.Errorf("row %d acked %d times, want once", id, k)
				}
			}
			if len(acks) != n {
				t.Errorf("%d rows acked, want %d", len(acks), n)
			}
		})
	}
}
