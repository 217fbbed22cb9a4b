package dialect_test

import (
	"context"
	"database/sql"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/internal/testdb"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// The claims Postgres runs most are planned once per connection: after its
// first few runs a prepared claim settles on the generic plan, whatever
// limit it is given, instead of being planned again at every run. And the
// lease claim locks no more rows than its limit.
func TestClaimsKeepAGenericPlan(t *testing.T) {
	t.Run("by id", func(t *testing.T) { claimsKeepAGenericPlan(t, false) })
	t.Run("by ctid", func(t *testing.T) { claimsKeepAGenericPlan(t, true) })
}

func claimsKeepAGenericPlan(t *testing.T, oneHeap bool) {
	ctx := context.Background()
	db := testdb.Open(t, testdb.Postgres(t))
	if err := migrations.Apply(ctx, db, "plan_jobs"); err != nil {
		t.Fatal(err)
	}
	if err := migrations.ApplyClaimBlocks(ctx, db, "plan_jobs", "id"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO plan_jobs (payload) SELECT 'x' FROM generate_series(1, 5000)"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "ANALYZE plan_jobs"); err != nil {
		t.Fatal(err)
	}
	d := dialect.Of(dialect.Postgres)
	q := d.Inbox(dialect.Table{Name: `"plan_jobs"`, ID: `"id"`, LockedUntil: `"locked_until"`, Attempts: `"attempts"`, OneHeap: oneHeap, Blocks: `"plan_jobs_claim_blocks"`},
		dialect.Times{Kind: dialect.Postgres, Encoding: dialect.Timestamptz})
	// The claim locks no more rows than its limit, whatever limit it writes
	// out for the planner: another session can lock every other row.
	probe, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	claim := q.ClaimLease.Call(now, time.Minute, 3, nil, math.MinInt64)
	if _, err := probe.ExecContext(ctx, claim.SQL, claim.Args...); err != nil {
		t.Fatal(err)
	}
	var lockable int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM (SELECT id FROM plan_jobs FOR UPDATE SKIP LOCKED) AS s").Scan(&lockable); err != nil {
		t.Fatal(err)
	}
	if lockable != 5000-3 {
		t.Errorf("a claim of 3 rows left %d of 5000 rows lockable by another session, want 4997", lockable)
	}
	if err := probe.Rollback(); err != nil {
		t.Fatal(err)
	}

	if strings.Contains(q.ClaimLease.SQL(), "ctid") != oneHeap {
		t.Fatalf("one heap %v, claim %s", oneHeap, q.ClaimLease.SQL())
	}

	conn, err := db.Conn(ctx) // prepared statements live on one connection
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	for i := range 12 {
		limit := []int{1, 3, 50, 100}[i%4]
		claim := q.ClaimLease.Call(now, time.Minute, limit, nil, math.MinInt64)
		rows, err := tx.QueryContext(ctx, claim.SQL, claim.Args...)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for rows.Next() {
			n++
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if n != limit {
			t.Fatalf("claim with limit %d took %d rows", limit, n)
		}
		sel := q.SelectAvailable.Call(now, nil, math.MinInt64)
		rows, err = tx.QueryContext(ctx, sel.SQL, sel.Args...)
		if err != nil {
			t.Fatal(err)
		}
		rows.Close()
		block := q.ClaimBlock.Call(now, time.Minute, limit, nil, math.MinInt64, 1<<40)
		if n := countRows(t, tx, block); n != limit {
			t.Fatalf("block claim with limit %d took %d rows", limit, n)
		}
	}
	var locked int
	if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM plan_jobs WHERE locked_until IS NOT NULL").Scan(&locked); err != nil {
		t.Fatal(err)
	}
	if want := 2 * 3 * (1 + 3 + 50 + 100); locked != want {
		t.Errorf("%d rows leased after the claims, want %d", locked, want)
	}
	rows, err := tx.QueryContext(ctx, "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE '%SKIP LOCKED%' AND statement NOT LIKE '%pg_prepared_statements%'")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	seen := 0
	for rows.Next() {
		var stmt string
		var generic, custom int
		if err := rows.Scan(&stmt, &generic, &custom); err != nil {
			t.Fatal(err)
		}
		seen++
		if generic == 0 {
			t.Errorf("planned at every run (%d custom plans, no generic one): %s", custom, stmt)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if seen != 3 {
		t.Errorf("%d claim statements prepared on the connection, want 3", seen)
	}
}

func countRows(t *testing.T, tx *sql.Tx, q dialect.Call) int {
	t.Helper()
	rows, err := tx.Query(q.SQL, q.Args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// OneHeap tells a plain table from a partitioned one and from a parent of
// child tables; SQLite has no addresses to use.
func TestOneHeap(t *testing.T) {
	ctx := context.Background()
	db := testdb.Open(t, testdb.Postgres(t))
	for _, q := range []string{
		"CREATE TABLE plain (id bigint PRIMARY KEY)",
		"CREATE TABLE parted (id bigint, g text) PARTITION BY LIST (g)",
		"CREATE TABLE parted_a PARTITION OF parted FOR VALUES IN ('a')",
		"CREATE TABLE parent (id bigint)",
		"CREATE TABLE child () INHERITS (parent)",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	d := dialect.Of(dialect.Postgres)
	for table, want := range map[string]bool{"plain": true, "parted": false, "parted_a": true, "parent": false, "child": true, "missing": false} {
		got, err := d.OneHeap(ctx, db, table)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("OneHeap(%s) = %v, want %v", table, got, want)
		}
	}
	if got, err := dialect.Of(dialect.SQLite).OneHeap(ctx, db, "plain"); got || err != nil {
		t.Errorf("OneHeap on SQLite = %v, %v; want false, nil", got, err)
	}
}

// On an integer (int4) id the claims' bigint resume point is still an index
// condition on the primary key: the cast sits on the parameter, never on
// the column.
func TestClaimsUseThePrimaryKeyOnAnIntegerID(t *testing.T) {
	ctx := context.Background()
	db := testdb.Open(t, testdb.Postgres(t))
	for _, q := range []string{
		"CREATE TABLE int_jobs (id serial PRIMARY KEY, locked_until timestamptz, payload bytea, attempts integer NOT NULL DEFAULT 0)",
		"INSERT INTO int_jobs (payload) SELECT 'x' FROM generate_series(1, 20000)",
		"ANALYZE int_jobs",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	d := dialect.Of(dialect.Postgres)
	for _, oneHeap := range []bool{false, true} {
		q := d.Inbox(dialect.Table{Name: `"int_jobs"`, ID: `"id"`, LockedUntil: `"locked_until"`, Attempts: `"attempts"`, OneHeap: oneHeap},
			dialect.Times{Kind: dialect.Postgres, Encoding: dialect.Timestamptz})
		now := time.Now()
		for name, c := range map[string]dialect.Call{
			"lease":   q.ClaimLease.Call(now, time.Minute, 10, nil, 15000),
			"rowlock": q.SelectAvailable.Call(now, nil, 15000),
		} {
			plan := explain(t, db, name, c)
			if !strings.Contains(plan, "Index Scan using int_jobs_pkey") || !strings.Contains(plan, "Index Cond: (id >=") {
				t.Errorf("%s (one heap %v): the resume point is not an index condition on the primary key:\n%s", name, oneHeap, plan)
			}
		}
	}
}

// The statements of a table's edges read the table by id, led by the
// edges, whatever the planner guesses of them: a table of edges never
// analyzed (one left empty stays so) is guessed at thousands of rows, and
// Postgres then read every row of a 200,000-row backlog into a hash at
// each sweep.
func TestDepsStatementsReadTheTableByID(t *testing.T) {
	ctx := context.Background()
	db := testdb.Open(t, testdb.Postgres(t))
	if err := migrations.Apply(ctx, db, "edge_plan_jobs"); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"INSERT INTO edge_plan_jobs (payload) SELECT 'x' FROM generate_series(1, 20000)",
		"ANALYZE edge_plan_jobs",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := migrations.ApplyDependencies(ctx, db, "edge_plan_jobs", "id"); err != nil {
		t.Fatal(err)
	}
	d := dialect.Of(dialect.Postgres)
	s := d.Deps(dialect.Table{Name: `"edge_plan_jobs"`, ID: `"id"`, LockedUntil: `"locked_until"`, Attempts: `"attempts"`, LastError: `"last_error"`},
		dialect.Times{Kind: dialect.Postgres, Encoding: dialect.Timestamptz})
	acked := []int64{1, 2, 3}
	for name, c := range map[string]dialect.Call{
		"stranded":  s.Stranded(),
		"unheld":    s.Unheld(),
		"release":   s.ReleaseAll(acked),
		"unblock":   s.Unblock(acked),
		"toRelease": s.ToRelease(acked),
	} {
		plan := explain(t, db, name, c)
		if strings.Contains(plan, "Seq Scan on edge_plan_jobs ") || strings.Contains(plan, "Seq Scan on edge_plan_jobs\n") {
			t.Errorf("%s reads the whole table:\n%s", name, plan)
		}
		// And each runs: nothing to do on a table without edges.
		if _, err := db.ExecContext(ctx, c.SQL, c.Args...); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
}

// explain is Postgres's plan of c, a line each.
func explain(t *testing.T, db *sql.DB, name string, c dialect.Call) string {
	t.Helper()
	rows, err := db.Query("EXPLAIN "+c.SQL, c.Args...)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	defer rows.Close()
	var plan strings.Builder
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan.WriteString(line + "\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return plan.String()
}
