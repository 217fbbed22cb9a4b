package inbox_test

import (
	"context"
	"database/sql"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// logCount counts the log records at Warn and above, keeping the first few.
type logCount struct {
	mu    sync.Mutex
	n     int
	first []string
}

func (l *logCount) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelWarn }
func (l *logCount) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n++
	if len(l.first) < 3 {
		msg := r.Message
		r.Attrs(func(a slog.Attr) bool { msg += " " + a.String(); return true })
		l.first = append(l.first, msg)
	}
	return nil
}
func (l *logCount) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logCount) WithGroup(string) slog.Handler      { return l }

// On SQLite the claims, acks and publishes of one broker take the write
// lock in turn: on a pool whose connections barely wait for the lock (a
// busy timeout of 1 ms, the least a pool is accepted with, so a second
// writer fails almost at once with SQLITE_BUSY), a drain with publishes
// beside it meets no such failure.
func TestSQLiteWritesTakeTurns(t *testing.T) {
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "turns.db")+
		"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(1)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(8)
	if err := migrations.Apply(ctx, db, "jobs"); err != nil {
		t.Fatal(err)
	}
	const inserted, published = 1500, 300
	if _, err := db.ExecContext(ctx, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < ?1) INSERT INTO jobs (payload) SELECT 'p' FROM c", inserted); err != nil {
		t.Fatal(err)
	}
	logs := &logCount{}
	b, err := inbox.New(db, inbox.WithLogger(slog.New(logs)), inbox.PollInterval(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	q := inbox.MustQueue[Job]("jobs")
	ev := inboxtest.NewEvents(t)
	sub, err := inbox.Subscribe(b, q, func(context.Context, Job) error { return nil }, inbox.Workers(50), ev.Observe())
	if err != nil {
		t.Fatal(err)
	}
	inboxtest.RunSubscription(t, sub)
	for i := range published {
		if _, err := inbox.Publish(ctx, b, q, Job{Payload: []byte("p")}); err != nil {
			t.Fatalf("publish %d beside the drain: %v", i, err)
		}
	}
	all := ev.WaitFor(time.Minute, "every row acked", func(e []inbox.Event) bool {
		return inboxtest.Count(e, inbox.Acked) >= inserted+published || logs.count() > 0
	})
	if n := logs.count(); n > 0 {
		t.Fatalf("%d warnings or errors during the drain, first: %v", n, logs.firstFew())
	}
	if n := inboxtest.Count(all, inbox.Acked); n != len(all) || n != inserted+published {
		t.Errorf("%d events, %d of them acks; want %d acks and nothing else", len(all), n, inserted+published)
	}
	if n := rows(t, db); n != 0 {
		t.Errorf("%d rows left", n)
	}
}

func (l *logCount) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

func (l *logCount) firstFew() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.first...)
}
