package advisory

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/internal/claim"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// newClaimer makes the form's claimer on a fresh reference table
// "advisory_jobs" on Postgres. The tests' table has a name of its own: an
// advisory lock's class comes from the table's name, and the packages
// tested beside this one lock rows of tables named jobs (in other schemas,
// with the same ids) in the same database, which this package's counts of
// pg_locks and skipped rows would see.
func newClaimer(t *testing.T) (*claimer, *sql.DB) {
	c, db, _ := newClaimerAt(t)
	return c, db
}

// newClaimerAt is newClaimer that also returns the database's URL.
func newClaimerAt(t *testing.T) (*claimer, *sql.DB, string) {
	t.Helper()
	f := newFixture(t, dialect.Postgres)
	return f.c, f.db, f.url
}

// fixture is the form's claimer on a fresh "advisory_jobs" table of four
// rows (ids 1 to 4), on one database, with what the tests do there.
type fixture struct {
	c   *claimer
	db  *sql.DB
	d   *dialect.Dialect
	url string
}

func newFixture(t *testing.T, kind dialect.Kind) *fixture {
	t.Helper()
	if kind == dialect.MySQL {
		return newFixtureAt(t, inboxtest.MySQL(t), kind)
	}
	return newFixtureAt(t, inboxtest.Postgres(t), kind)
}

// newFixtureAt is newFixture on the database at url.
func newFixtureAt(t *testing.T, url string, kind dialect.Kind) *fixture {
	t.Helper()
	encoding := dialect.Timestamptz
	if kind == dialect.MySQL {
		encoding = dialect.Datetime
	}
	db, d, err := dialect.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	if err := migrations.Apply(ctx, db, "advisory_jobs"); err != nil {
		t.Fatal(err)
	}
	tbl := claim.Table{
		Table: dialect.Table{Name: d.Quote("advisory_jobs"), ID: d.Quote("id"), LockedUntil: d.Quote("locked_until"),
			Attempts: d.Quote("attempts"), LastError: d.Quote("last_error")},
		Unquoted: "advisory_jobs",
		Times:    dialect.Times{Kind: kind, Encoding: encoding},
		New:      func(dest []any) (any, []any) { return nil, dest },
	}
	stmts := d.Inbox(tbl.Table, tbl.Times)
	env := claim.Env{DB: db, Dialect: d, Table: tbl, SQL: &stmts, Clock: clock.Host{}, Conns: 3}
	c, err := Form.New(env)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{c: c.(*claimer), db: db, d: d, url: url}
	f.insert(t, 4)
	return f
}

// onEach runs test on Postgres and on MariaDB/MySQL.
func onEach(t *testing.T, test func(t *testing.T, f *fixture)) {
	for _, k := range []dialect.Kind{dialect.Postgres, dialect.MySQL} {
		t.Run(k.String(), func(t *testing.T) {
			t.Parallel()
			test(t, newFixture(t, k))
		})
	}
}

// insert writes n more rows.
func (f *fixture) insert(t *testing.T, n int) {
	t.Helper()
	q := "INSERT INTO advisory_jobs (payload) SELECT 'p' FROM generate_series(1, $1)"
	if f.d.Kind == dialect.MySQL {
		q = "INSERT INTO advisory_jobs (payload) SELECT 'p' FROM seq_1_to_1000 WHERE seq <= ?"
	}
	if _, err := f.db.Exec(q, n); err != nil {
		t.Fatal(err)
	}
}

// delay sets row id's time an hour ahead, as a retry would.
func (f *fixture) delay(t *testing.T, id int64) {
	t.Helper()
	q := "UPDATE advisory_jobs SET locked_until = now() + interval '1 hour' WHERE id = $1"
	if f.d.Kind == dialect.MySQL {
		q = "UPDATE advisory_jobs SET locked_until = UTC_TIMESTAMP(6) + INTERVAL 1 HOUR WHERE id = ?"
	}
	if _, err := f.db.Exec(q, id); err != nil {
		t.Fatal(err)
	}
}

// lockElsewhere takes the advisory locks of rows from to to (inclusive) on
// a session of its own, held until the test ends.
func (f *fixture) lockElsewhere(t *testing.T, from, to int64) {
	t.Helper()
	ctx := context.Background()
	other, err := f.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	if f.d.Kind != dialect.MySQL {
		if _, err := other.ExecContext(ctx, "SELECT pg_advisory_lock($1, (g % 4294967296)::bigint::bit(32)::int) FROM generate_series($2::bigint, $3::bigint) AS g", Class("advisory_jobs"), from, to); err != nil {
			t.Fatal(err)
		}
		return
	}
	database := f.database(t)
	for id := from; id <= to; id++ {
		var got int
		if err := other.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0)", dialect.AdvisoryLockName(database, Class("advisory_jobs"), id)).Scan(&got); err != nil || got != 1 {
			t.Fatalf("lock row %d elsewhere: %d, %v", id, got, err)
		}
	}
}

func (f *fixture) database(t *testing.T) string {
	t.Helper()
	var database string
	if err := f.db.QueryRow("SELECT DATABASE()").Scan(&database); err != nil {
		t.Fatal(err)
	}
	return database
}

// locks counts the advisory locks of the table's class held in the
// database: on MariaDB/MySQL those of every id up to 2000.
func (f *fixture) locks(t *testing.T) int {
	t.Helper()
	if f.d.Kind != dialect.MySQL {
		return locks(t, f.db)
	}
	database := f.database(t)
	var n int
	for from := int64(1); from <= 2000; from += 200 {
		parts := make([]string, 0, 200)
		args := make([]any, 0, 200)
		for id := from; id < from+200; id++ {
			parts = append(parts, "(IS_USED_LOCK(?) IS NOT NULL)")
			args = append(args, dialect.AdvisoryLockName(database, Class("advisory_jobs"), id))
		}
		var k int
		if err := f.db.QueryRow("SELECT "+strings.Join(parts, " + "), args...).Scan(&k); err != nil {
			t.Fatal(err)
		}
		n += k
	}
	return n
}

// throughWrapper is a claimer like c on a pool of its own to url whose
// driver wraps pgx's, as otelsql or sqlhooks do: its connections are not
// pgx's own, so the form sends what it would pipeline as separate
// statements.
func throughWrapper(t *testing.T, c *claimer, url string) *claimer {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(wrappingConnector{stdlib.GetConnector(*cfg)})
	t.Cleanup(func() { db.Close() })
	env := c.env
	env.DB = db
	w, err := Form.New(env)
	if err != nil {
		t.Fatal(err)
	}
	return w.(*claimer)
}

// wrappingConnector hands out pgx's connections inside a type of its own.
type wrappingConnector struct{ driver.Connector }

func (w wrappingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	c, err := w.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return wrappedConn{c.(*stdlib.Conn)}, nil
}

// wrappedConn is a pgx connection (every method of it promoted) that is
// not a *stdlib.Conn.
type wrappedConn struct{ *stdlib.Conn }

func locks(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = $1::int::oid
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`, Class("advisory_jobs")).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Rows deleted or delayed by their previous holder between the look and
// the lock are not handed out, and their locks are let go at once; rows
// another session holds are skipped without counting against the limit.
func TestRereadAndSkip(t *testing.T) { onEach(t, rereadAndSkip) }

func rereadAndSkip(t *testing.T, f *fixture) {
	c, db := f.c, f.db
	ctx := context.Background()
	f.lockElsewhere(t, 1, 1)
	// Between each lock and its reread, row 2 is deleted and row 3
	// delayed, as their previous holder would.
	c.locked.Hold()
	type claimed struct {
		jobs []*claim.Job
		err  error
	}
	done := make(chan claimed, 1)
	go func() {
		jobs, err := c.Claim(ctx, 3)
		done <- claimed{jobs, err}
	}()
	var r claimed
	for held := true; held; {
		select {
		case <-c.locked.Reached():
			if _, err := db.Exec("DELETE FROM advisory_jobs WHERE id = 2"); err != nil {
				t.Error(err)
			}
			f.delay(t, 3)
			c.locked.Resume()
		case r = <-done:
			held = false
		case <-time.After(30 * time.Second):
			t.Fatal("the claim neither locked rows nor returned within 30s")
		}
	}
	jobs, err := r.jobs, r.err
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || jobs[0].ID != 4 {
		t.Fatalf("claimed %v, want row 4 alone (1 held elsewhere, 2 deleted, 3 delayed)", ids(jobs))
	}
	if n := f.locks(t); n != 2 {
		t.Errorf("%d advisory locks of the class held, want 2 (row 1 by the other session, row 4 by the claim)", n)
	}
	if c.Held() != 1 {
		t.Errorf("Held = %d with one job in work, want 1", c.Held())
	}
	if err := jobs[0].Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if n := f.locks(t); n != 1 {
		t.Errorf("%d advisory locks after the ack, want 1 (the other session's)", n)
	}
	if c.Held() != 0 {
		t.Errorf("Held = %d after the last job was settled, want 0", c.Held())
	}
}

// The jobs of one claim share a connection, which goes back to the pool
// when the last of them is settled; retry and release let their rows go.
func TestSharedConnection(t *testing.T) { onEach(t, sharedConnection) }

func sharedConnection(t *testing.T, f *fixture) {
	c, db := f.c, f.db
	ctx := context.Background()
	jobs, err := c.Claim(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 4 {
		t.Fatalf("claimed %v, want all 4 rows", ids(jobs))
	}
	if c.Held() != 1 || db.Stats().InUse != 1 {
		t.Errorf("Held = %d, pool in use = %d with 4 jobs of one claim in work; want 1 and 1", c.Held(), db.Stats().InUse)
	}
	if again, err := c.Claim(ctx, 10); err != nil || len(again) != 0 {
		t.Errorf("a second claim took %v (%v) of rows held by the first", ids(again), err)
	}
	settle := []func(context.Context) error{
		jobs[0].Ack,
		func(ctx context.Context) error { return jobs[1].Retry(ctx, time.Hour, "later") },
		func(ctx context.Context) error { return jobs[2].Park(ctx, "never") },
		jobs[3].Release,
	}
	for i, f := range settle {
		if err := f(ctx); err != nil {
			t.Fatalf("settle job %d: %v", i, err)
		}
		if want := 1; i == len(settle)-1 {
			want = 0
			if c.Held() != want {
				t.Errorf("Held = %d after the last settlement, want 0", c.Held())
			}
		} else if c.Held() != want {
			t.Errorf("Held = %d with %d jobs unsettled, want 1", c.Held(), len(settle)-1-i)
		}
	}
	if err := jobs[0].Ack(ctx); err == nil {
		t.Error("a second settlement of one job succeeded")
	}
	if n := f.locks(t); n != 0 {
		t.Errorf("%d advisory locks left after every job was settled", n)
	}
	var attempts int
	var lastError string
	if err := db.QueryRow(f.d.Rebind("SELECT attempts, last_error FROM advisory_jobs WHERE id = $1"), jobs[1].ID).Scan(&attempts, &lastError); err != nil {
		t.Fatal(err)
	}
	if attempts != 1 || lastError != "later" {
		t.Errorf("retried row: attempts %d, last_error %q; want 1, \"later\"", attempts, lastError)
	}
	// Only the released row is available again: the retried one waits an
	// hour, the parked one for ever, the acked one is gone.
	again, err := c.Claim(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 1 || again[0].ID != jobs[3].ID {
		t.Errorf("after settling, claimed %v, want the released row %d alone", ids(again), jobs[3].ID)
	}
	for _, j := range again {
		_ = j.Release(ctx)
	}
}

func ids(jobs []*claim.Job) []int64 {
	var out []int64
	for _, j := range jobs {
		out = append(out, j.ID)
	}
	return out
}

// A claim steps past rows other sessions hold, however many precede the
// free ones (more than one lock statement tries), and holds locks on the
// rows it returns and no others.
func TestStepPastHeld(t *testing.T) { onEach(t, stepPastHeld) }

func stepPastHeld(t *testing.T, f *fixture) {
	c := f.c
	ctx := context.Background()
	f.insert(t, 96)
	const held = 80 // rows 1 to 80: more than two statements of 2*2+walkSlack tries
	f.lockElsewhere(t, 1, held)
	jobs, err := c.Claim(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(jobs); len(got) != 2 || got[0] != held+1 || got[1] != held+2 {
		t.Fatalf("claimed %v, want rows %d and %d", got, held+1, held+2)
	}
	if n := f.locks(t); n != held+2 {
		t.Errorf("%d advisory locks of the class held, want %d (the other session's and the claim's two)", n, held+2)
	}
	for _, j := range jobs {
		if err := j.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := f.locks(t); n != held {
		t.Errorf("%d advisory locks of the class after the release, want the other session's %d", n, held)
	}
}

// Two hundred rows held by other sessions ahead of the available ones (two
// instances of 100 workers in work) do not make a claim for one row come
// back empty.
func TestStepPastManyHeld(t *testing.T) { onEach(t, stepPastManyHeld) }

func stepPastManyHeld(t *testing.T, f *fixture) {
	c := f.c
	ctx := context.Background()
	f.insert(t, 400)
	var first int64
	if err := f.db.QueryRow("SELECT min(id) FROM advisory_jobs").Scan(&first); err != nil {
		t.Fatal(err)
	}
	const held = 204 // the four rows newFixture writes, and 200 more
	f.lockElsewhere(t, first, first+held-1)
	jobs, err := c.Claim(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || jobs[0].ID != first+held {
		t.Fatalf("claimed %v past %d held rows, want [%d]", ids(jobs), held, first+held)
	}
}
