package benchkit

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Waits tallies what the database's client sessions were doing, sampled
// from pg_stat_activity during a drain: for each wait (wait_event_type:
// wait_event, or "CPU" for an active session waiting on nothing), the
// sessions in it summed over the samples.
type Waits struct {
	Samples int
	Active  int // active sessions summed over the samples
	By      map[string]int
}

// SampleWaits samples the client sessions of db's database (other than its
// own) every interval until ctx ends. It runs on its own connection.
func SampleWaits(ctx context.Context, db *sql.DB, every time.Duration, w *Waits) {
	w.By = map[string]int{}
	conn, err := db.Conn(context.WithoutCancel(ctx))
	if err != nil {
		return
	}
	defer conn.Close()
	const q = `SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU') FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend' AND state = 'active'`
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		rows, err := conn.QueryContext(ctx, q)
		if err != nil {
			return
		}
		w.Samples++
		for rows.Next() {
			var ev string
			if rows.Scan(&ev) == nil {
				w.By[ev]++
				w.Active++
			}
		}
		rows.Close()
	}
}

// String gives the average active sessions and the waits that held at
// least 0.05 sessions on average, most first: "active=5.1 CPU=2.0
// IO:WALSync=1.2 ...".
func (w *Waits) String() string {
	if w.Samples == 0 {
		return "active=-1"
	}
	type kv struct {
		k string
		n int
	}
	var all []kv
	for k, n := range w.By {
		all = append(all, kv{k, n})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].n > all[j].n })
	s := []string{fmt.Sprintf("active=%.2f", float64(w.Active)/float64(w.Samples))}
	for _, e := range all {
		if avg := float64(e.n) / float64(w.Samples); avg >= 0.05 {
			s = append(s, fmt.Sprintf("%s=%.2f", strings.ReplaceAll(e.k, " ", "_"), avg))
		}
	}
	return strings.Join(s, " ")
}

// DBCounters are cumulative counters of a Postgres database and its WAL.
type DBCounters struct {
	Commits, WALRecords, WALSyncs, WALFPI int64
	OK                                    bool
}

// ReadDBCounters reads them (pg_stat_database, pg_stat_wal; Postgres 14
// and later). A backend reports its counts within a second while busy:
// read them again after a pause to see a drain's whole.
func ReadDBCounters(ctx context.Context, db *sql.DB) DBCounters {
	var c DBCounters
	err := db.QueryRowContext(ctx, `SELECT d.xact_commit, w.wal_records, w.wal_sync, w.wal_fpi
FROM pg_stat_database d, pg_stat_wal w WHERE d.datname = current_database()`).Scan(&c.Commits, &c.WALRecords, &c.WALSyncs, &c.WALFPI)
	c.OK = err == nil
	return c
}

// PerJob gives the counters' growth from a to b per job, as key=value.
func PerJob(a, b DBCounters, jobs int) string {
	if !a.OK || !b.OK || jobs <= 0 {
		return "commits_per_job=-1 wal_syncs_per_job=-1"
	}
	j := float64(jobs)
	return fmt.Sprintf("commits_per_job=%.3f wal_syncs_per_job=%.3f wal_records_per_job=%.2f wal_fpi_per_job=%.3f",
		float64(b.Commits-a.Commits)/j, float64(b.WALSyncs-a.WALSyncs)/j, float64(b.WALRecords-a.WALRecords)/j, float64(b.WALFPI-a.WALFPI)/j)
}
