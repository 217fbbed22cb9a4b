package inbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
)

// Every bad shape of a table gets its own message naming the column and
// the DDL that fixes it.
func TestTableCheck(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		if strings.HasPrefix(url, "mysql://") {
			t.Skip("MySQL's cases, in its own DDL, are TestTableCheckMySQL's")
		}
		pg := strings.HasPrefix(url, "postgres")
		b, err := inbox.Open(url)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		ctx := context.Background()
		type tc struct {
			name   string
			ddl    string
			group  string
			column string
			want   string
		}
		cases := []tc{
			{name: "missing table", ddl: "", want: "does not exist"},
			{name: "missing table, grouped", ddl: "", group: "eu", want: "CREATE INDEX"},
			{name: "missing locked_until", ddl: "CREATE TABLE jobs (id integer PRIMARY KEY, payload text, group_name text, attempts integer, last_error text)", column: "locked_until", want: "ADD COLUMN \"locked_until\""},
			{name: "missing attempts", ddl: "CREATE TABLE jobs (id integer PRIMARY KEY, payload text, group_name text, locked_until timestamptz, last_error text)", column: "attempts", want: "ADD COLUMN \"attempts\""},
			{name: "no group index", group: "eu", ddl: "CREATE TABLE jobs (id integer PRIMARY KEY, payload text, group_name text, locked_until timestamptz, attempts integer, last_error text)", column: "group_name", want: "CREATE INDEX"},
			{name: "missing id", ddl: "CREATE TABLE jobs (payload text, group_name text, locked_until timestamptz, attempts integer, last_error text)", column: "id", want: "\"id\""},
			{name: "missing id, another primary key", ddl: "CREATE TABLE jobs (k text PRIMARY KEY, payload text, group_name text, locked_until timestamptz, attempts integer, last_error text); INSERT INTO jobs (k, payload) VALUES ('a', 'p')", column: "id", want: "\"id\""},
			{name: "no id index", ddl: "CREATE TABLE jobs (id integer, payload text, group_name text, locked_until timestamptz, attempts integer, last_error text)", column: "id", want: "primary key"},
		}
		if pg {
			cases = append(cases,
				tc{name: "locked_until without time zone", ddl: "CREATE TABLE jobs (id integer PRIMARY KEY, payload text, group_name text, locked_until timestamp, attempts integer, last_error text)", column: "locked_until", want: "TYPE timestamptz"},
				tc{name: "text locked_until", ddl: "CREATE TABLE jobs (id integer PRIMARY KEY, payload text, group_name text, locked_until text, attempts integer, last_error text); INSERT INTO jobs (id, payload, locked_until) VALUES (1, 'p', '2026-01-01 00:00:00+00')", column: "locked_until", want: "TYPE timestamptz"},
				tc{name: "text id", ddl: "CREATE TABLE jobs (id text PRIMARY KEY, payload text, group_name text, locked_until timestamptz, attempts integer, last_error text); INSERT INTO jobs (id, payload) VALUES ('7', 'p')", column: "id", want: "TYPE bigint"},
				tc{name: "text attempts", ddl: "CREATE TABLE jobs (id integer PRIMARY KEY, payload text, group_name text, locked_until timestamptz, attempts text, last_error text)", column: "attempts", want: "TYPE integer"},
			)
		} else {
			cases = append(cases,
				tc{name: "blob locked_until", ddl: "CREATE TABLE jobs (id integer PRIMARY KEY, payload text, group_name text, locked_until blob, attempts integer, last_error text)", column: "locked_until", want: "DATETIME"},
				tc{name: "text id", ddl: "CREATE TABLE jobs (id text PRIMARY KEY, payload text, group_name text, locked_until datetime, attempts integer, last_error text); INSERT INTO jobs (id, payload) VALUES ('7', 'p'); CREATE INDEX jobs_payload ON jobs (payload)", column: "id", want: "INTEGER"},
				tc{name: "text attempts", ddl: "CREATE TABLE jobs (id integer PRIMARY KEY, payload text, group_name text, locked_until datetime, attempts text NOT NULL DEFAULT '0', last_error text); INSERT INTO jobs (id, payload) VALUES (3, 'p')", column: "attempts", want: "INTEGER"},
			)
		}
		for _, c := range cases {
			t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
				if _, err := b.DB().Exec("DROP TABLE IF EXISTS jobs"); err != nil {
					t.Fatal(err)
				}
				if c.ddl != "" {
					ddl := c.ddl
					if !pg {
						ddl = strings.ReplaceAll(ddl, "timestamptz", "datetime")
					}
					if _, err := b.DB().Exec(ddl); err != nil {
						t.Fatal(err)
					}
				}
				q := inbox.MustQueue[Job]("jobs")
				if c.group != "" {
					q = q.Group(c.group)
				}
				sub, err := inbox.Subscribe(b, q, func(context.Context, Job) error { return nil })
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				err = sub.Run(ctx)
				var te *inbox.TableError
				if !errors.As(err, &te) {
					t.Fatalf("Run = %v, want a *inbox.TableError", err)
				}
				if te.Table != "jobs" || te.Column != c.column || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("error %q: want table jobs, column %q, text %q", err, c.column, c.want)
				}
				runEveryFix(t, b, q, te)
			})
		}
	})
}

func TestBadInputRefusedAtConstruction(t *testing.T) {
	if _, err := inbox.NewQueue[Job]("invoice_jobs; DROP TABLE x"); err == nil {
		t.Fatal("a table name with SQL in it was accepted")
	}
	type noLease struct {
		ID      int64  `db:"id" inbox:"id,generated"`
		Payload []byte `db:"payload" inbox:"payload"`
	}
	if _, err := inbox.NewQueue[noLease]("jobs"); err == nil || !strings.Contains(err.Error(), "locked_until") {
		t.Fatalf("a struct without locked_until: %v", err)
	}
	type badColumn struct {
		ID          int64      `db:"id\"; DROP TABLE x; --" inbox:"id,generated"`
		LockedUntil *time.Time `db:"locked_until" inbox:"locked_until"`
		Payload     []byte     `db:"payload" inbox:"payload"`
	}
	if _, err := inbox.NewQueue[badColumn]("jobs"); err == nil {
		t.Fatal("a column name with SQL in it was accepted")
	}
	type badRole struct {
		ID          int64      `db:"id" inbox:"identifier"`
		LockedUntil *time.Time `db:"locked_until" inbox:"locked_until"`
		Payload     []byte     `db:"payload" inbox:"payload"`
	}
	if _, err := inbox.NewQueue[badRole]("jobs"); err == nil || !strings.Contains(err.Error(), "unknown role") {
		t.Fatalf("an unknown role: %v", err)
	}
	b, err := inbox.Open("sqlite://:memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	q := inbox.MustQueue[Job]("jobs")
	for _, opt := range []inbox.SubOption{inbox.Workers(0), inbox.Lease(0), inbox.MaxAttempts(0), inbox.ShutdownTimeout(-1)} {
		if _, err := inbox.Subscribe(b, q, func(context.Context, Job) error { return nil }, opt); err == nil {
			t.Error("a bad subscription option was accepted")
		}
	}
	if _, err := inbox.Open("sqlite://:memory:", inbox.PollInterval(0)); err == nil {
		t.Error("PollInterval(0) accepted")
	}
	if _, err := inbox.Open("sqlite://:memory:", inbox.ListenNotify()); err == nil {
		t.Error("ListenNotify on SQLite accepted")
	}
}

// runEveryFix runs every fix the check printed, once, as printed and in
// the order printed; the table must then pass: a check reports every
// problem of a table at once.
func runEveryFix[T any](t *testing.T, b *inbox.Broker, q inbox.Queue[T], te *inbox.TableError) {
	t.Helper()
	if len(te.Problems) == 0 || te.Problems[0].Problem != te.Problem || te.Problems[0].Fix != te.Fix {
		t.Fatalf("the error's first problem is not its own: %#v", te)
	}
	for _, p := range te.Problems {
		if p.Fix == "" {
			continue
		}
		if _, err := b.DB().ExecContext(context.Background(), p.Fix); err != nil {
			t.Fatalf("the fix for %q fails as printed: %v\n%s\nall of them: %v", p.Problem, err, p.Fix, te)
		}
	}
	if err := checkOnce(t, b, q); err != nil {
		t.Fatalf("after every printed fix ran:\n%v\nthe check printed:\n%v", err, te)
	}
}

// checkOnce runs q's table check as a service would: nil once the service
// has started, else the check's error.
func checkOnce[T any](t *testing.T, b *inbox.Broker, q inbox.Queue[T]) error {
	t.Helper()
	svc := inbox.NewService("check", "test", b)
	svc.Signals = false
	if _, err := inbox.Handle(svc, q, func(context.Context, T) error { return errors.New("not now") }, inbox.Workers(1)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	select {
	case err := <-done:
		return err
	case <-svc.Started():
		cancel()
		<-done
		return nil
	case <-time.After(30 * time.Second):
		t.Fatal("the table check took over 30s")
		return nil
	}
}
