package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// The soak's limit mode (--limit n): each row carries a tenant, the workers
// subscribe with inbox.Limit(soakTenant, n), and each handling marks its
// tenant, the slot and fence inbox.SlotFrom gives it, and the attempt its
// claim counted. The verdict then asks, from the marks alone:
//
//   - that no handling began while n others of its tenant were in work
//     (key_overlaps), save where one of those held the same slot under an
//     older fence: its hold had ended and it ran on (lost_holds, counted
//     apart as restart_overlaps are);
//   - that a later holder of a slot always had the greater fence;
//   - that no attempt went to a row that waited on its limit: a row's
//     attempts rise by one per handling marked, and the attempts used
//     without a mark (a claim whose worker was killed before the handler
//     began, or whose session was terminated before the claim's answer
//     arrived) stay within what the disruptions can explain.

// soakTenant is the limited column of the soak's table.
const soakTenant = "tenant"

// tenantRun is how many consecutive rows share a tenant: a claim in id order
// meets more rows of one tenant than its limit lets run, and passes over
// them.
const tenantRun = 10

// tenantOf is the SQL of the tenant of row number n: runs of tenantRun rows,
// the tenants in turn.
func (t *soakTables) tenantOf(n string) string {
	div := "/"
	if t.d.Kind == dialect.MySQL {
		div = "DIV"
	}
	return fmt.Sprintf("(%s %s %d) %% %d", n, div, tenantRun, t.keys)
}

// prepareLimit creates the slot table and frees every slot an earlier
// soak of the table left held.
func prepareLimit(ctx context.Context, db *sql.DB, t *soakTables, limit int) error {
	if limit == 0 {
		return nil
	}
	if err := migrations.ApplyLimits(ctx, db); err != nil {
		return err
	}
	q := t.d.Rebind("DELETE FROM " + dialect.LimitTable + " WHERE limit_name = $1")
	if _, err := db.ExecContext(ctx, q, t.jobs+":"+soakTenant); err != nil {
		return fmt.Errorf("free the slots of an earlier soak: %w", err)
	}
	return nil
}

// soakSideDB is where the soak, its producer and its handlers' marks write:
// the soak's URL and table, except on MariaDB/MySQL with --terminate-every.
// There a session is told by its default database alone (the process list
// shows no application name), so the side pools open on
// information_schema and name the soak's tables with their database,
// leaving the broker's sessions the only ones on the soak's database.
type soakSideDB struct {
	url, table string
	brokerDB   string // MariaDB: the database of the brokers' sessions
}

func soakSide(c soakConfig, d *dialect.Dialect) (soakSideDB, error) {
	s := soakSideDB{url: c.url, table: c.table}
	if d.Kind != dialect.MySQL || c.terminateEvery == 0 {
		return s, nil
	}
	u, err := url.Parse(c.url)
	if err != nil {
		return s, fmt.Errorf("--db: %w", err)
	}
	s.brokerDB = strings.TrimPrefix(u.Path, "/")
	if !strings.Contains(c.table, ".") {
		s.table = s.brokerDB + "." + c.table
	}
	u.Path = "/information_schema"
	s.url = u.String()
	return s, nil
}

// soakBrokerApp is the application name of a worker's broker sessions on
// Postgres: the sessions --terminate-every picks from.
const soakBrokerApp = "soak_broker_"

// brokerURL is the worker's broker URL: on Postgres its sessions are named
// after the worker.
func brokerURL(raw string, instance int) (string, error) {
	if !strings.HasPrefix(raw, "postgres://") && !strings.HasPrefix(raw, "postgresql://") {
		return raw, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	q := u.Query()
	q.Set("application_name", soakBrokerApp+strconv.Itoa(instance))
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// terminator terminates the sessions of the workers' brokers, one at a
// time.
type terminator struct {
	terminating sync.WaitGroup
	busy        atomic.Bool
	terminated  atomic.Int64 // sessions ended
	missed      atomic.Int64 // tries that ended none (none found, or the database down)
}

// terminate ends one session of a worker's broker, preferring one in a
// statement or a transaction, in the background; a try still under way
// (the database restarting) skips this one.
func (r *soakRun) terminate(ctx context.Context) {
	if !r.busy.CompareAndSwap(false, true) {
		r.missed.Add(1)
		return
	}
	r.terminating.Add(1)
	go func() {
		defer r.terminating.Done()
		defer r.busy.Store(false)
		tctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		ok, err := r.terminateOne(tctx)
		switch {
		case err != nil:
			r.missed.Add(1)
			r.logf("could not terminate a broker session: %v", err)
		case ok:
			r.terminated.Add(1)
		default:
			r.missed.Add(1)
		}
	}()
}

func (r *soakRun) terminateOne(ctx context.Context) (bool, error) {
	if r.d.Kind == dialect.Postgres {
		var ok bool
		err := r.db.QueryRowContext(ctx, "SELECT pg_terminate_backend(pid) FROM (SELECT pid FROM pg_stat_activity "+
			"WHERE datname = current_database() AND application_name LIKE $1 AND pid <> pg_backend_pid() "+
			"ORDER BY state = 'idle', random() LIMIT 1) s", soakBrokerApp+"%").Scan(&ok)
		if err == sql.ErrNoRows {
			return false, nil
		}
		return ok, err
	}
	var id int64
	err := r.db.QueryRowContext(ctx, "SELECT id FROM information_schema.processlist WHERE db = ? AND id <> CONNECTION_ID() "+
		"ORDER BY command = 'Sleep', RAND() LIMIT 1", r.side.brokerDB).Scan(&id)
	if err == sql.ErrNoRows {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if _, err := r.db.ExecContext(ctx, "KILL "+strconv.FormatInt(id, 10)); err != nil {
		if strings.Contains(err.Error(), "Unknown thread id") { // it ended meanwhile
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// limitVerdict is the limit mode's part of the verdict: the fields it adds
// to the soak's line, and what fails the run.
func (r *soakRun) limitVerdict(ctx context.Context) (string, []string, error) {
	v, err := r.t.limitVerdict(ctx, r.db, r.c.limit)
	if err != nil {
		return "", nil, err
	}
	if v.LostHolds > 0 || v.KeyOverlaps > 0 || v.FenceNotRisen > 0 {
		pairs, err := r.t.slotOverlaps(ctx, r.db)
		if err != nil {
			return "", nil, err
		}
		for _, p := range pairs {
			r.logf("slot held twice: %s", p)
		}
	}
	// A kill strands at most the rows of the worker's claim in flight
	// before their handlers begin (at most --workers), a terminated
	// session the rows of one claim, a restart the claims of every worker.
	c := &r.c
	bound := int64(c.workers)*(int64(r.kills)+r.terminated.Load()+int64(r.unexpected)) + int64(c.processes*c.workers*r.restarts)
	line := fmt.Sprintf(" limit=%d keys=%d terminated=%d max_in_work_per_key=%d key_overlaps=%d lost_holds=%d fence_not_risen=%d unslotted=%d attempts_unmarked=%d attempts_bound=%d unstarted=%d first_attempt_over_1=%d",
		c.limit, c.keys, r.terminated.Load(), v.MaxInWork, v.KeyOverlaps, v.LostHolds, v.FenceNotRisen, v.Unslotted, v.AttemptsUnmarked, bound, v.Unstarted, v.FirstOver1)
	var why []string
	if v.KeyOverlaps > 0 {
		why = append(why, fmt.Sprintf("%d handlings began while %d others of their tenant were in work", v.KeyOverlaps, c.limit))
	}
	if v.FenceNotRisen > 0 {
		why = append(why, fmt.Sprintf("%d later holders of a slot had no greater fence", v.FenceNotRisen))
	}
	if v.Unslotted > 0 {
		why = append(why, fmt.Sprintf("%d handlings of a tenant's row held no slot", v.Unslotted))
	}
	if v.AttemptsUnmarked > bound {
		why = append(why, fmt.Sprintf("%d attempts used without a handling, more than the %d the kills, terminations and restarts explain", v.AttemptsUnmarked, bound))
	}
	if c.terminateEvery > 0 && r.terminated.Load() == 0 {
		why = append(why, "no broker session was terminated")
	}
	return line, why, nil
}

// limitVerdict is the limit mode judged from the marks.
type limitVerdict struct {
	MaxInWork        int64 // the most handlings of one tenant in work at once
	KeyOverlaps      int64 // handlings begun with limit others of the tenant in work, no lost hold among them
	LostHolds        int64 // pairs of overlapping handlings on one slot, the earlier under the older fence
	FenceNotRisen    int64 // the same pairs, the later without the greater fence
	Unslotted        int64 // handlings of a row with a tenant that held no slot
	AttemptsUnmarked int64 // attempts counted beyond the handlings marked
	Unstarted        int64 // handlings whose hold ended before their start mark
	FirstOver1       int64 // rows whose first marked handling was not their first attempt
}

func (t *soakTables) limitVerdict(ctx context.Context, db *sql.DB, limit int) (limitVerdict, error) {
	var v limitVerdict
	m := t.qMarks
	// The others of b's tenant in work when b began.
	others := "SELECT count(*) FROM " + m + " a WHERE a.tenant = b.tenant AND a.id <> b.id AND a.start_us <= b.start_us AND a.seen_us > b.start_us"
	superseded := "EXISTS (SELECT 1 FROM " + m + " a WHERE a.tenant = b.tenant AND a.slot = b.slot AND a.id <> b.id " +
		"AND a.start_us <= b.start_us AND a.seen_us > b.start_us AND a.fence < b.fence)"
	sameSlot := "FROM " + m + " a JOIN " + m + " b ON a.tenant = b.tenant AND a.slot = b.slot AND a.slot >= 0 AND a.id <> b.id " +
		"AND (a.start_us, a.id) < (b.start_us, b.id) AND b.start_us < a.seen_us"
	first := "NOT EXISTS (SELECT 1 FROM " + m + " p WHERE p.seq = m.seq AND (p.start_us, p.id) < (m.start_us, m.id))"
	err := db.QueryRowContext(ctx, "SELECT "+
		"(SELECT COALESCE(max(c), 0) + 1 FROM (SELECT ("+others+") AS c FROM "+m+" b WHERE b.tenant IS NOT NULL) x), "+
		"(SELECT count(*) FROM "+m+" b WHERE b.tenant IS NOT NULL AND ("+others+") >= "+strconv.Itoa(limit)+" AND NOT "+superseded+"), "+
		"(SELECT count(*) "+sameSlot+" AND a.fence < b.fence), "+
		"(SELECT count(*) "+sameSlot+" AND a.fence >= b.fence), "+
		"(SELECT count(*) FROM "+m+" WHERE tenant IS NOT NULL AND slot < 0), "+
		"(SELECT COALESCE(sum(mx - n), 0) FROM (SELECT max(attempts) AS mx, count(*) AS n FROM (SELECT seq, attempts FROM "+m+
		" UNION ALL SELECT seq, attempts FROM "+t.qUnstarted+") u GROUP BY seq) g WHERE mx > n), "+
		"(SELECT count(*) FROM "+t.qUnstarted+"), "+
		"(SELECT count(*) FROM "+m+" m WHERE m.attempts > 1 AND "+first+")").
		Scan(&v.MaxInWork, &v.KeyOverlaps, &v.LostHolds, &v.FenceNotRisen, &v.Unslotted, &v.AttemptsUnmarked, &v.Unstarted, &v.FirstOver1)
	return v, err
}

// slotOverlap is a pair of overlapping handlings on one slot, a began
// first; times are microseconds on the database's clock.
type slotOverlap struct {
	tenant, slot                         int64
	aSeq, aInstance, aStart, aSeen, aFen int64
	bSeq, bInstance, bStart, bSeen, bFen int64
}

func (o slotOverlap) String() string {
	return fmt.Sprintf("tenant %d slot %d: row %d instance %d start=%d seen=%d fence=%d; row %d instance %d start=%d seen=%d fence=%d",
		o.tenant, o.slot, o.aSeq, o.aInstance, o.aStart, o.aSeen, o.aFen, o.bSeq, o.bInstance, o.bStart, o.bSeen, o.bFen)
}

// slotOverlaps reads the pairs of overlapping handlings on one slot (at
// most 100), the evidence of a failed or disturbed limit.
func (t *soakTables) slotOverlaps(ctx context.Context, db *sql.DB) ([]slotOverlap, error) {
	m := t.qMarks
	rows, err := db.QueryContext(ctx, "SELECT a.tenant, a.slot, a.seq, a.instance, a.start_us, a.seen_us, a.fence, "+
		"b.seq, b.instance, b.start_us, b.seen_us, b.fence FROM "+m+" a JOIN "+m+" b ON a.tenant = b.tenant AND a.slot = b.slot "+
		"AND a.slot >= 0 AND a.id <> b.id AND (a.start_us, a.id) < (b.start_us, b.id) AND b.start_us < a.seen_us ORDER BY a.start_us LIMIT 100")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []slotOverlap
	for rows.Next() {
		var o slotOverlap
		if err := rows.Scan(&o.tenant, &o.slot, &o.aSeq, &o.aInstance, &o.aStart, &o.aSeen, &o.aFen,
			&o.bSeq, &o.bInstance, &o.bStart, &o.bSeen, &o.bFen); err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, rows.Err()
}
