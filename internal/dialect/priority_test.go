package dialect_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/internal/testdb"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// With a priority column, the claims of every form walk the (priority,
// id) index (or (group, priority, id) for a group): EXPLAIN shows the
// index, and no sort of the table.
func TestPriorityClaimsUseTheIndex(t *testing.T) {
	ctx := context.Background()
	db := testdb.Open(t, testdb.Postgres(t))
	if err := migrations.Apply(ctx, db, "prio_jobs"); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"ALTER TABLE prio_jobs ADD COLUMN priority smallint NOT NULL DEFAULT 0",
		"CREATE INDEX prio_jobs_priority_id ON prio_jobs (priority, id)",
		"CREATE INDEX prio_jobs_group_priority_id ON prio_jobs (group_name, priority, id)",
		"INSERT INTO prio_jobs (payload, priority, group_name) SELECT 'x', (i % 7)::smallint, 'g' || (i % 3) FROM generate_series(1, 20000) AS i",
		"ANALYZE prio_jobs",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	d := dialect.Of(dialect.Postgres)
	now := time.Now()
	for _, c := range []struct {
		name, group, index string
		oneHeap            bool
	}{
		{"whole table", "", "prio_jobs_priority_id", true},
		{"whole table by id", "", "prio_jobs_priority_id", false},
		{"group", `"group_name"`, "prio_jobs_group_priority_id", true},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			q := d.Inbox(dialect.Table{Name: `"prio_jobs"`, ID: `"id"`, LockedUntil: `"locked_until"`, Attempts: `"attempts"`, Group: c.group, Priority: `"priority"`, OneHeap: c.oneHeap},
				dialect.Times{Kind: dialect.Postgres, Encoding: dialect.Timestamptz})
			var group any
			if c.group != "" {
				group = "g1"
			}
			for name, stmt := range map[string]dialect.Call{
				"lease":   q.ClaimLease.Call(now, time.Minute, 100, group, math.MinInt64),
				"rowlock": q.SelectAvailable.Call(now, group, math.MinInt64),
				// Each step of the walk is one probe of the index after the
				// last (priority, id); no step sorts.
				"advisory": q.LockAvailable.Call(now, 100, group, 7, math.MinInt64, math.MinInt32, 232),
			} {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				rows, err := tx.QueryContext(ctx, "EXPLAIN "+stmt.SQL, stmt.Args...)
				if err != nil {
					t.Fatal(err)
				}
				var plan []string
				for rows.Next() {
					var line string
					if err := rows.Scan(&line); err != nil {
						t.Fatal(err)
					}
					plan = append(plan, line)
				}
				rows.Close()
				tx.Rollback()
				text := strings.Join(plan, "\n")
				if strings.Contains(text, "Sort") || strings.Contains(text, "Seq Scan") || !strings.Contains(text, c.index) {
					t.Errorf("%s claim plan: want %s walked, no sort, no sequential scan:\n%s", name, c.index, text)
				}
			}
		})
	}
}
