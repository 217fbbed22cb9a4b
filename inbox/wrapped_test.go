package inbox_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"
	"modernc.org/sqlite"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/migrations"
	"github.com/sqlinbox/sqlinbox/schedule"
)

// wrapDriver stands for an instrumenting wrapper (otelsql, sqlhooks): a
// driver of its own Go type whose connections forward every call to the
// wrapped driver's.
type wrapDriver struct{ inner driver.Driver }

func (w wrapDriver) Open(name string) (driver.Conn, error) {
	c, err := w.inner.Open(name)
	if err != nil {
		return nil, err
	}
	return wrapConn{c}, nil
}

type wrapConn struct{ driver.Conn }

func (c wrapConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, q, args)
}

func (c wrapConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, q, args)
}

func (c wrapConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	return c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, q)
}

func (c wrapConn) BeginTx(ctx context.Context, o driver.TxOptions) (driver.Tx, error) {
	return c.Conn.(driver.ConnBeginTx).BeginTx(ctx, o)
}

func (c wrapConn) CheckNamedValue(nv *driver.NamedValue) error {
	if ch, ok := c.Conn.(driver.NamedValueChecker); ok {
		return ch.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

func (c wrapConn) ResetSession(ctx context.Context) error {
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func init() {
	sql.Register("wrapped-sqlite", wrapDriver{&sqlite.Driver{}})
	sql.Register("wrapped-pgx", wrapDriver{stdlib.GetDefaultDriver()})
	sql.Register("nothing", wrapDriver{nullDriver{}})
}

// A pool opened through a wrapping driver is recognised by what its
// database answers, not by the driver's Go type, and drains like any other.
func TestWrappedDriver(t *testing.T) {
	for db, open := range map[string]func(t *testing.T) (string, string){
		"sqlite": func(t *testing.T) (string, string) {
			dsn, err := dialect.SQLiteDSN(inboxtest.SQLite(t))
			if err != nil {
				t.Fatal(err)
			}
			return "wrapped-sqlite", dsn
		},
		"postgres": func(t *testing.T) (string, string) { return "wrapped-pgx", inboxtest.Postgres(t) },
	} {
		t.Run(db, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			name, dsn := open(t)
			pool, err := sql.Open(name, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			pool.SetMaxOpenConns(4)
			b, err := inbox.New(pool)
			if err != nil {
				t.Fatalf("a %s pool through a wrapping driver: %v", db, err)
			}
			defer b.Close()
			if b.Dialect() != db {
				t.Fatalf("recognised as %s, want %s", b.Dialect(), db)
			}
			if _, err := schedule.New(pool); err != nil {
				t.Fatalf("schedule.New on a %s pool through a wrapping driver: %v", db, err)
			}
			if err := migrations.Apply(ctx, pool, "jobs"); err != nil {
				t.Fatal(err)
			}
			q := inbox.MustQueue[Job]("jobs")
			for range 5 {
				if _, err := inbox.Publish(ctx, b, q, Job{Payload: []byte("w")}); err != nil {
					t.Fatal(err)
				}
			}
			ev := inboxtest.NewEvents(t)
			sub, err := inbox.Subscribe(b, q, func(context.Context, Job) error { return nil }, inbox.Workers(2), ev.Observe())
			if err != nil {
				t.Fatal(err)
			}
			stop := inboxtest.RunSubscription(t, sub)
			ev.Wait("5 acks", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Acked) == 5 })
			stop()
		})
	}
}

// A pool of a database the library does not serve is refused saying what it
// takes.
func TestUnknownDatabaseRefused(t *testing.T) {
	pool, err := sql.Open("nothing", "")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := inbox.New(pool); err == nil || !strings.Contains(err.Error(), "SQLite, Postgres or MySQL") {
		t.Fatalf("a pool of an unknown database: %v", err)
	}
}

type nullDriver struct{}

func (nullDriver) Open(string) (driver.Conn, error) { return nil, driver.ErrBadConn }
