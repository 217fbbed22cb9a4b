package migrations_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/internal/testdb"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// TestPostgresTableLeavesRoomForClaims: the reference table on Postgres
// keeps half of each page free, so a claim's update of locked_until can
// stay on its page, and applying it twice changes nothing.
func TestPostgresTableLeavesRoomForClaims(t *testing.T) {
	db := testdb.Open(t, testdb.Postgres(t))
	ctx := context.Background()
	for range 2 {
		if err := migrations.Apply(ctx, db, "room_jobs"); err != nil {
			t.Fatal(err)
		}
	}
	var opts string
	if err := db.QueryRowContext(ctx, "SELECT coalesce(array_to_string(reloptions, ','), '') FROM pg_class WHERE oid = 'room_jobs'::regclass").Scan(&opts); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(opts, "fillfactor=50") {
		t.Errorf("room_jobs has reloptions %q, want fillfactor=50", opts)
	}
}

// TestSchedulePruneUsesAnIndex: done shares stay until their moment is
// pruned at each heartbeat, so the prune must not read the whole table. The
// shares are recent and done (their lease the epoch), as after a busy hour:
// only the moment narrows the statement.
func TestSchedulePruneUsesAnIndex(t *testing.T) {
	for name, url := range map[string]func(testing.TB) string{"sqlite": testdb.SQLite, "postgres": testdb.Postgres} {
		t.Run(name, func(t *testing.T) { prunePlan(t, url(t)) })
	}
}

func prunePlan(t *testing.T, url string) {
	db := testdb.Open(t, url)
	ctx := context.Background()
	if err := migrations.ApplySchedules(ctx, db); err != nil {
		t.Fatal(err)
	}
	d, err := dialect.Detect(db)
	if err != nil {
		t.Fatal(err)
	}
	// The statement the scheduler runs, as it builds it (schedule.New).
	tm := dialect.Times{Kind: d.Kind, Encoding: dialect.EncodingFor(d.Kind, "TEXT")}
	prune := d.Schedule(tm).PruneShares.Call(time.Now(), -time.Hour)
	explain := "EXPLAIN QUERY PLAN "
	if d.Kind == dialect.Postgres {
		if _, err := db.ExecContext(ctx, `INSERT INTO sqlinbox_schedule_shares
			(schedule, moment, worker, workers, dealt_to, instance_index, instances, runner, runners, locked_until)
			SELECT 's', $1::bigint - g, 0, 1, 'a', 0, 1, 0, 1, 'epoch' FROM generate_series(1, 20000) g`, time.Now().UnixMilli()); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, "ANALYZE sqlinbox_schedule_shares"); err != nil {
			t.Fatal(err)
		}
		explain = "EXPLAIN "
	}
	rows, err := db.QueryContext(ctx, explain+prune.SQL, prune.Args...)
	if err != nil {
		t.Fatal(err)
	}
	var plan strings.Builder
	cols, _ := rows.Columns()
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintln(&plan, vals...)
	}
	rows.Close()
	if p := plan.String(); strings.Contains(p, "Seq Scan") || !strings.Contains(p, "sqlinbox_schedule_shares_moment") {
		t.Errorf("%s: the prune does not use the moment index:\n%s", url, p)
	}
}

// TestMySQLLocks: the lock table on MariaDB/MySQL applies twice, is InnoDB
// (row locks and transactions, which the acquisition needs), compares names
// byte for byte, and its fence counter row is kept, not reset, by a second
// apply.
func TestMySQLLocks(t *testing.T) {
	db := testdb.Open(t, testdb.MySQL(t))
	ctx := context.Background()
	if err := migrations.ApplyLocks(ctx, db); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "UPDATE sqlinbox_locks_fence SET fence = 41 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	if err := migrations.ApplyLocks(ctx, db); err != nil {
		t.Fatalf("second apply: %v", err)
	}
	var fence int64
	if err := db.QueryRowContext(ctx, "SELECT fence FROM sqlinbox_locks_fence WHERE id = 1").Scan(&fence); err != nil || fence != 41 {
		t.Fatalf("fence counter after a second apply: %d, %v; want 41 kept", fence, err)
	}
	for _, table := range []string{"sqlinbox_locks", "sqlinbox_locks_fence"} {
		var engine string
		if err := db.QueryRowContext(ctx, "SELECT engine FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?", table).Scan(&engine); err != nil {
			t.Fatal(err)
		}
		if !strings.EqualFold(engine, "InnoDB") {
			t.Errorf("%s is %s, want InnoDB", table, engine)
		}
	}
	for _, name := range []string{"Job", "job"} {
		if _, err := db.ExecContext(ctx, "INSERT INTO sqlinbox_locks (namespace, name, slot, token, fence, expires_at) VALUES ('ns', ?, 0, 't', 1, UTC_TIMESTAMP(6))", name); err != nil {
			t.Fatalf("names differing in case only must be two locks: %v", err)
		}
	}
}

// TestRegistryGainsColumns: a registry an earlier version made (its
// instances without pickup_fallback, its subscriptions without limit_spec,
// one of each registered) gets the columns from ApplyRegistry, the old rows
// keeping ” and NULL in them, on every database; applying it again changes
// nothing, and a limit spec written then reads back.
func TestRegistryGainsColumns(t *testing.T) {
	for name, url := range map[string]func(testing.TB) string{"sqlite": testdb.SQLite, "postgres": testdb.Postgres, "mysql": testdb.MySQL} {
		t.Run(name, func(t *testing.T) {
			db := testdb.Open(t, url(t))
			ctx := context.Background()
			id := "VARCHAR(255)"
			if name != "mysql" {
				id = "text"
			}
			for _, q := range []string{
				"CREATE TABLE sqlinbox_instances (id " + id + " NOT NULL PRIMARY KEY, service text NOT NULL, version text NOT NULL, host text NOT NULL, pid integer NOT NULL, started_at bigint NOT NULL, heartbeat_at bigint NOT NULL, every_ms bigint NOT NULL)",
				"INSERT INTO sqlinbox_instances VALUES ('i', 's', 'v', 'h', 1, 0, 0, 1000)",
				"CREATE TABLE sqlinbox_subscriptions (instance " + id + " NOT NULL, position integer NOT NULL, name text NOT NULL, table_name text NOT NULL, group_name text NOT NULL, form text NOT NULL, workers integer NOT NULL, lease_ms bigint NOT NULL, roles text NOT NULL, PRIMARY KEY (instance, position))",
				"INSERT INTO sqlinbox_subscriptions VALUES ('i', 0, 'jobs', 'jobs', '', 'lease', 1, 30000, '{}')",
			} {
				if _, err := db.ExecContext(ctx, q); err != nil {
					t.Fatal(err)
				}
			}
			for range 2 {
				if err := migrations.ApplyRegistry(ctx, db); err != nil {
					t.Fatal(err)
				}
			}
			var fallback string
			if err := db.QueryRowContext(ctx, "SELECT pickup_fallback FROM sqlinbox_instances WHERE id = 'i'").Scan(&fallback); err != nil || fallback != "" {
				t.Fatalf("pickup_fallback of an instance an earlier version registered: %q, %v; want ''", fallback, err)
			}
			var spec sql.NullString
			if err := db.QueryRowContext(ctx, "SELECT limit_spec FROM sqlinbox_subscriptions WHERE instance = 'i'").Scan(&spec); err != nil || spec.Valid {
				t.Fatalf("limit_spec of a subscription an earlier version registered: %v, %v; want NULL", spec, err)
			}
			want := `[{"kind":"limit","name":"jobs:customer_id","column":"customer_id","n":2}]`
			if _, err := db.ExecContext(ctx, "UPDATE sqlinbox_subscriptions SET limit_spec = '"+want+"' WHERE instance = 'i'"); err != nil {
				t.Fatal(err)
			}
			if err := db.QueryRowContext(ctx, "SELECT limit_spec FROM sqlinbox_subscriptions WHERE instance = 'i'").Scan(&spec); err != nil || spec.String != want {
				t.Fatalf("limit_spec written after the upgrade: %v, %v; want %s", spec, err, want)
			}
		})
	}
}
