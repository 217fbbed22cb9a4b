package inbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// The table check on MariaDB/MySQL: every bad shape gets its message, naming
// the column, and a fix that runs as printed (one statement: pools run
// one at a time), after which the table passes.
func TestTableCheckMySQL(t *testing.T) {
	url := inboxtest.MySQL(t)
	b, err := inbox.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const ok = "id BIGINT AUTO_INCREMENT PRIMARY KEY, payload LONGBLOB, group_name VARCHAR(64) NOT NULL DEFAULT '', locked_until DATETIME(6) NULL, attempts INT NOT NULL DEFAULT 0, last_error TEXT"
	for _, c := range []struct {
		name, ddl, group, column, want string
	}{
		{name: "missing table", want: "ENGINE=InnoDB"},
		{name: "missing table, grouped", group: "eu", want: "KEY `jobs_group_id`"},
		{name: "missing locked_until", ddl: "CREATE TABLE jobs (id BIGINT PRIMARY KEY, payload LONGBLOB, group_name VARCHAR(64), attempts INT, last_error TEXT)", column: "locked_until", want: "ADD COLUMN `locked_until` DATETIME(6)"},
		{name: "missing attempts", ddl: "CREATE TABLE jobs (id BIGINT PRIMARY KEY, payload LONGBLOB, group_name VARCHAR(64), locked_until DATETIME(6), last_error TEXT)", column: "attempts", want: "ADD COLUMN `attempts`"},
		{name: "no group index", group: "eu", ddl: "CREATE TABLE jobs (" + ok + ")", column: "group_name", want: "CREATE INDEX"},
		{name: "missing id", ddl: "CREATE TABLE jobs (payload LONGBLOB, group_name VARCHAR(64), locked_until DATETIME(6), attempts INT, last_error TEXT)", column: "id", want: "AUTO_INCREMENT PRIMARY KEY"},
		{name: "missing id, another primary key", ddl: "CREATE TABLE jobs (k VARCHAR(10) PRIMARY KEY, payload LONGBLOB, group_name VARCHAR(64), locked_until DATETIME(6), attempts INT, last_error TEXT); INSERT INTO jobs (k, payload) VALUES ('a', 'p')", column: "id", want: "AUTO_INCREMENT UNIQUE"},
		{name: "no id index", ddl: "CREATE TABLE jobs (id BIGINT, payload LONGBLOB, group_name VARCHAR(64), locked_until DATETIME(6), attempts INT, last_error TEXT)", column: "id", want: "primary key"},
		{name: "seconds locked_until", ddl: "CREATE TABLE jobs (id BIGINT PRIMARY KEY, payload LONGBLOB, group_name VARCHAR(64), locked_until DATETIME, attempts INT, last_error TEXT); INSERT INTO jobs (id, payload, locked_until) VALUES (1, 'p', '2026-01-01 00:00:00')", column: "locked_until", want: "MODIFY COLUMN `locked_until` DATETIME(6)"},
		{name: "timestamp locked_until", ddl: "CREATE TABLE jobs (id BIGINT PRIMARY KEY, payload LONGBLOB, group_name VARCHAR(64), locked_until TIMESTAMP(6) NULL, attempts INT, last_error TEXT)", column: "locked_until", want: "DATETIME(6)"},
		{name: "text id", ddl: "CREATE TABLE jobs (id VARCHAR(10) PRIMARY KEY, payload LONGBLOB, group_name VARCHAR(64), locked_until DATETIME(6), attempts INT, last_error TEXT); INSERT INTO jobs (id, payload) VALUES ('7', 'p')", column: "id", want: "MODIFY COLUMN `id` BIGINT NOT NULL AUTO_INCREMENT"},
		{name: "text attempts", ddl: "CREATE TABLE jobs (id BIGINT PRIMARY KEY, payload LONGBLOB, group_name VARCHAR(64), locked_until DATETIME(6), attempts VARCHAR(5), last_error TEXT)", column: "attempts", want: "MODIFY COLUMN `attempts` INT"},
		{name: "myisam", ddl: "CREATE TABLE jobs (" + ok + ") ENGINE=MyISAM", want: "ENGINE=InnoDB"},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			if _, err := b.DB().Exec("DROP TABLE IF EXISTS jobs"); err != nil {
				t.Fatal(err)
			}
			for ddl := range strings.SplitSeq(c.ddl, "; ") {
				if ddl == "" {
					continue
				}
				if _, err := b.DB().Exec(ddl); err != nil {
					t.Fatal(err)
				}
			}
			q := inbox.MustQueue[Job]("jobs")
			if c.group != "" {
				q = q.Group(c.group)
			}
			err := checkOnce(t, b, q)
			var te *inbox.TableError
			if !errors.As(err, &te) {
				t.Fatalf("check = %v, want a *inbox.TableError", err)
			}
			if te.Table != "jobs" || te.Column != c.column || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q: want table jobs, column %q, text %q", err, c.column, c.want)
			}
			runEveryFix(t, b, q, te)
		})
	}
}

// migrations.Apply makes the reference table on MariaDB/MySQL, InnoDB, with
// the columns and indexes the check asks for; applying it again changes
// nothing, and its created_at is UTC whatever the session's time zone.
func TestMigrationsMySQL(t *testing.T) {
	ctx := context.Background()
	b, err := inbox.Open(inboxtest.MySQL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for range 2 {
		if err := migrations.Apply(ctx, b.DB(), "jobs"); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []inbox.Queue[Job]{inbox.MustQueue[Job]("jobs"), inbox.MustQueue[Job]("jobs").Group("eu")} {
		if err := checkOnce(t, b, q); err != nil {
			t.Fatalf("the reference table fails its check: %v", err)
		}
	}
	conn, err := b.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET time_zone = '+05:00'"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "INSERT INTO jobs (payload) VALUES ('p')"); err != nil {
		t.Fatal(err)
	}
	var skew int
	if err := conn.QueryRowContext(ctx, "SELECT ABS(TIMESTAMPDIFF(SECOND, created_at, UTC_TIMESTAMP(6))) FROM jobs").Scan(&skew); err != nil || skew > 60 {
		t.Errorf("created_at is %d s from UTC_TIMESTAMP (%v)", skew, err)
	}
	if _, err := conn.ExecContext(ctx, "SET time_zone = '+00:00'"); err != nil {
		t.Fatal(err)
	}
}
