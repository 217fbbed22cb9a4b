//go:build unix

package failovertest_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// cluster is the pg_auto_failover cluster: its monitor, and the directory
// where .ci/failover keeps each node's pid file.
type cluster struct {
	url     string
	dir     string
	monitor *pgx.Conn
}

// node is one Postgres node of the cluster.
type node struct {
	name string
	port int
}

func openCluster(t *testing.T, raw string) *cluster {
	t.Helper()
	monitorURL, dir := os.Getenv("FAILOVER_MONITOR_URL"), os.Getenv("FAILOVER_DIR")
	if monitorURL == "" || dir == "" {
		t.Fatalf("%s is set but FAILOVER_MONITOR_URL or FAILOVER_DIR is not: set all three from .ci/failover start", urlEnv)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := pgx.Connect(ctx, monitorURL)
	if err != nil {
		t.Fatalf("connect to the monitor at FAILOVER_MONITOR_URL: %v", err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	return &cluster{url: raw, dir: dir, monitor: m}
}

// nodes returns the primary and the secondary, as the monitor sees them.
func (c *cluster) nodes(t *testing.T) (primary, secondary node) {
	t.Helper()
	rows, err := c.monitor.Query(context.Background(), "SELECT nodename, nodeport, reportedstate FROM pgautofailover.node")
	if err != nil {
		t.Fatalf("read the nodes from the monitor: %v", err)
	}
	defer rows.Close()
	for rows.Next() {
		var n node
		var state string
		if err := rows.Scan(&n.name, &n.port, &state); err != nil {
			t.Fatal(err)
		}
		switch state {
		case "primary":
			primary = n
		case "secondary":
			secondary = n
		}
	}
	if rows.Err() != nil || primary.name == "" || secondary.name == "" {
		t.Fatalf("the monitor shows no primary and secondary (%v)", rows.Err())
	}
	return primary, secondary
}

// waitSettled waits until the monitor sees a primary and a secondary, each
// in the state it was assigned.
func (c *cluster) waitSettled(t *testing.T) {
	t.Helper()
	var states string
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(2 * time.Minute)
	for {
		err := c.monitor.QueryRow(context.Background(), `SELECT string_agg(reportedstate || '/' || goalstate, ' ' ORDER BY reportedstate) FROM pgautofailover.node`).Scan(&states)
		if err != nil {
			t.Fatalf("read the nodes' states from the monitor: %v", err)
		}
		if states == "primary/primary secondary/secondary" {
			return
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("the cluster's nodes report %q after 2 minutes, not a primary and a secondary (a node killed by an earlier run comes back with .ci/failover rejoin $FAILOVER_DIR)", states)
		}
	}
}

// kill sends SIGKILL to n's pg_autoctl and its Postgres (one process group,
// whose leader's pid .ci/failover keeps in DIR/NAME.pid), as if the node
// died.
func (c *cluster) kill(t *testing.T, n node) time.Time {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.dir, n.name+".pid"))
	if err != nil {
		t.Fatalf("read %s's pid file: %v", n.name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		t.Fatalf("%s's pid file holds %q", n.name, b)
	}
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill %s's process group %d: %v", n.name, pid, err)
	}
	return time.Now()
}

// firstWrite returns when a write through the cluster's URL first commits
// on n: each try, every 25 ms, connects afresh, as the URL's read-write
// node may change.
// The write is a row in each of tables, so each queue has one waiting at
// that moment.
func (c *cluster) firstWrite(t *testing.T, n node, tables []string) time.Time {
	t.Helper()
	inserts := make([]string, len(tables))
	for i, table := range tables {
		inserts[i] = "INSERT INTO " + table + " (payload) VALUES ('probe')"
	}
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(time.Minute)
	var last error
	for {
		ok, err := c.writeOn(n, strings.Join(inserts, "; "))
		if ok {
			return time.Now()
		}
		if err != nil {
			last = err
		}
		select {
		case <-tick.C:
		case <-deadline:
			var states string
			_ = c.monitor.QueryRow(context.Background(), `SELECT string_agg(nodename || ' ' || reportedstate || '/' || goalstate || CASE WHEN health = 1 THEN '' ELSE ' (unhealthy)' END, ', ') FROM pgautofailover.node`).Scan(&states)
			t.Fatalf("no write through %s committed on %s within a minute (the monitor shows %s); last error: %v", urlEnv, n.name, states, last)
		}
	}
}

// writeOn runs stmts through a fresh connection if it lands on n.
func (c *cluster) writeOn(n node, stmts string) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.url)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.Background())
	if conn.PgConn().Conn().RemoteAddr().String() != fmt.Sprintf("127.0.0.1:%d", n.port) {
		return false, nil
	}
	_, err = conn.Exec(ctx, stmts)
	return err == nil, err
}

// waitFor checks cond every 10 ms (the code raises no signal for it) and
// fails the test after bound.
func waitFor(t *testing.T, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(bound)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("waited %v for %s", bound, what)
		}
	}
}
