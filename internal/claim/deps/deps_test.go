package deps

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/internal/testdb"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// While the table of edges holds none, acks' releases are not sent: the
// look that follows a skipped ack finds no edge and the quiet goes on, or
// finds the edge another process wrote to the row before its ack, and
// releases the row's child.
func TestQuietReleasesAnEdgeWrittenMeanwhile(t *testing.T) {
	for _, db := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(db, func(t *testing.T) {
			t.Parallel()
			url := map[string]func(testing.TB) string{"sqlite": testdb.SQLite, "postgres": testdb.Postgres, "mysql": testdb.MySQL}[db](t)
			quietRelease(t, url)
		})
	}
}

func quietRelease(t *testing.T, url string) {
	ctx := context.Background()
	db := testdb.Open(t, url)
	d, err := dialect.Detect(db)
	if err != nil {
		t.Fatal(err)
	}
	table := testdb.UniqueName(t)
	if err := migrations.Apply(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	if err := migrations.ApplyDependencies(ctx, db, table, "id"); err != nil {
		t.Fatal(err)
	}
	tm := dialect.Times{Kind: d.Kind, Encoding: dialect.EncodingFor(d.Kind, "")}
	if d.EncodingDeclared() {
		cols, err := d.Columns(ctx, db, table)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cols {
			if c.Name == "locked_until" {
				tm.Encoding = dialect.EncodingFor(d.Kind, c.Type)
			}
		}
	}
	q := d.Quote(table)
	sq := d.Deps(dialect.Table{Name: q, ID: d.Quote("id"), LockedUntil: d.Quote("locked_until"), LastError: d.Quote("last_error")}, tm)
	released := make(chan struct{}, 4)
	r := New(Config{DB: db, SQL: sq, Writer: dialect.NewWriter(d), Clock: clock.Host{}, Table: table, Sweep: time.Hour,
		Log: slog.New(slog.DiscardHandler), Released: func() {
			select {
			case released <- struct{}{}:
			default:
			}
		}})
	insert := func(lockedUntil any) int64 {
		t.Helper()
		if _, err := db.ExecContext(ctx, d.Rebind(fmt.Sprintf("INSERT INTO %s (payload, locked_until) VALUES ('x', $1)", q)), lockedUntil); err != nil {
			t.Fatal(err)
		}
		var id int64
		if err := db.QueryRowContext(ctx, fmt.Sprintf("SELECT MAX(id) FROM %s", q)).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	ack := func(id int64) { // the row's ack commits, then its release is asked for
		t.Helper()
		if _, err := db.ExecContext(ctx, d.Rebind(fmt.Sprintf("DELETE FROM %s WHERE id = $1", q)), id); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		r.Acked(id, func() { close(done) })
		<-done
	}
	state := func() (quiet bool, skipped int) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.quiet, len(r.skipped)
	}

	ack(insert(nil)) // a release that finds nothing: the table of edges holds none
	if quiet, _ := state(); !quiet {
		t.Fatal("after a release that made nothing available, with no edge in the table, releases are still sent")
	}
	ack(insert(nil))
	if _, skipped := state(); skipped != 1 {
		t.Fatalf("%d acks wait for the look, want 1: the release was sent", skipped)
	}
	r.Wait() // the look: no edge
	if quiet, skipped := state(); !quiet || skipped != 0 {
		t.Fatalf("after a look at a table of edges holding none: quiet %v, %d acks waiting; want true, 0", quiet, skipped)
	}

	// Another process writes a child waiting for parent, then parent's
	// ack commits here.
	parent := insert(nil)
	child := insert(tm.Encode(dialect.Waiting))
	if _, err := db.ExecContext(ctx, d.Rebind(fmt.Sprintf("INSERT INTO %s (child_id, parent_id) VALUES ($1, $2)", d.Quote(dialect.DepsName(table)))), child, parent); err != nil {
		t.Fatal(err)
	}
	ack(parent)
	select {
	case <-released:
	case <-time.After(10 * time.Second):
		t.Fatal("the child of a row acked while the table of edges looked empty was not released")
	}
	r.Wait()
	var waits bool
	if err := db.QueryRowContext(ctx, d.Rebind(fmt.Sprintf("SELECT CASE WHEN locked_until IS NULL THEN 0 ELSE 1 END FROM %s WHERE id = $1", q)), child).Scan(&waits); err != nil && err != sql.ErrNoRows {
		t.Fatal(err)
	}
	if quiet, _ := state(); waits || quiet {
		t.Fatalf("after the look found the edge: the child waits %v, quiet %v; want false, false", waits, quiet)
	}
}
