package main

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// The soak's workflow mode (--workflow diamonds): the producer publishes
// --jobs diamonds through a broker, each four rows in one transaction: A,
// then B and C after A (inbox.After), then D after B and C. Sequence
// numbers run A, B, C, D: row n is step (n-1) % 4 of diamond (n+3) / 4.
// The workers handle with inbox.HandleTx, inserting the row's sent row
// with the database's clock in the handling's transaction, so a sent row
// is the row's ack and its time is just before the ack committed. The
// verdict then asks that every row was acked exactly once, and that no
// handling of a step began before every parent's ack (early_starts).

// soakDiamonds is the workflow the soak knows.
const soakDiamonds = "diamonds"

// rows is how many rows the producer writes: four per diamond in the
// workflow mode.
func (c *soakConfig) rows() int64 {
	if c.workflow == soakDiamonds {
		return 4 * c.jobs
	}
	return c.jobs
}

// prepareWorkflow gives the table its edges.
func prepareWorkflow(ctx context.Context, db *sql.DB, t *soakTables, workflow string) error {
	if workflow == "" {
		return nil
	}
	if err := migrations.ApplyDependencies(ctx, db, t.jobs, "id"); err != nil {
		return fmt.Errorf("give the soak's table its edges: %w", err)
	}
	return nil
}

// diamondProducer publishes diamonds through a broker.
type diamondProducer struct {
	b *inbox.Broker
	q inbox.Queue[referenceRow]
}

func newDiamondProducer(url, table string) (*diamondProducer, error) {
	q, err := inbox.NewQueue[referenceRow](table)
	if err != nil {
		return nil, err
	}
	b, err := inbox.Open(url, inbox.MaxConns(2))
	if err != nil {
		return nil, err
	}
	return &diamondProducer{b: b, q: q}, nil
}

// publish publishes rows from..to, whole diamonds, and records them, in one
// transaction; with hold it says so on stdout and holds the transaction
// open, for the soak to kill it there.
func (p *diamondProducer) publish(ctx context.Context, record string, from, to int64, hold bool) error {
	tx, err := p.b.DB().BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	row := func(seq int64, opts ...inbox.PublishOption) (int64, error) {
		return inbox.PublishTx(ctx, p.b, tx, p.q, referenceRow{Payload: []byte(strconv.FormatInt(seq, 10))}, opts...)
	}
	for a := from; a+3 <= to; a += 4 {
		ida, err := row(a)
		if err != nil {
			return err
		}
		idb, err := row(a+1, inbox.After(ida))
		if err != nil {
			return err
		}
		idc, err := row(a+2, inbox.After(ida))
		if err != nil {
			return err
		}
		if _, err := row(a+3, inbox.After(idb, idc)); err != nil {
			return err
		}
	}
	return commitBatch(ctx, tx, record, from, to, hold)
}

// workflowVerdict is the workflow mode's part of the verdict: the fields it
// adds to the soak's line, and what fails the run.
func (r *soakRun) workflowVerdict(ctx context.Context) (string, []string, error) {
	notOnce, err := sentNotOnce(ctx, r.db, r.t)
	if err != nil {
		return "", nil, err
	}
	v, err := r.t.workflowVerdict(ctx, r.db)
	if err != nil {
		return "", nil, err
	}
	line := fmt.Sprintf(" workflow=%s diamonds=%d acked_not_once=%d early_starts=%d d_handlings=%d min_step_gap_us=%d max_step_wait_ms=%d",
		r.c.workflow, r.c.jobs, notOnce, v.Early, v.DHandlings, v.MinGapUS, v.MaxWaitUS/1000)
	var why []string
	if notOnce > 0 {
		why = append(why, fmt.Sprintf("%d rows not acked exactly once", notOnce))
	}
	if v.Early > 0 {
		why = append(why, fmt.Sprintf("%d handlings of a step began before a parent's ack", v.Early))
	}
	return line, why, nil
}

// flowVerdict is the workflow mode judged from the marks and the acks.
type flowVerdict struct {
	Early      int64 // handlings of B, C or D begun before an ack of each parent
	DHandlings int64 // handlings of D rows (kills make some twice)
	// MinGapUS and MaxWaitUS: over the first handling of each B, C and D,
	// the least and the most time from its last parent's ack to its start.
	MinGapUS, MaxWaitUS int64
}

func (t *soakTables) workflowVerdict(ctx context.Context, db *sql.DB) (flowVerdict, error) {
	var v flowVerdict
	sent := t.d.Quote(sentTable(t.jobs))
	// Each handling of a step, with its parents p1 and p2 (the same for B
	// and C).
	steps := "SELECT m.seq, m.id, m.start_us, " +
		"CASE WHEN (m.seq - 1) % 4 = 3 THEN m.seq - 1 ELSE m.seq - (m.seq - 1) % 4 END AS p1, " +
		"CASE WHEN (m.seq - 1) % 4 = 3 THEN m.seq - 2 ELSE m.seq - (m.seq - 1) % 4 END AS p2 " +
		"FROM " + t.qMarks + " m WHERE (m.seq - 1) % 4 > 0"
	acked := func(p string) string {
		return "EXISTS (SELECT 1 FROM " + sent + " s WHERE s.seq = c." + p + " AND s.at_us <= c.start_us)"
	}
	first := "NOT EXISTS (SELECT 1 FROM " + t.qMarks + " e WHERE e.seq = c.seq AND (e.start_us, e.id) < (c.start_us, c.id))"
	waits := "SELECT c.start_us - (SELECT max(s.at_us) FROM " + sent + " s WHERE s.seq IN (c.p1, c.p2)) AS w FROM (" + steps + ") c WHERE " + first
	err := db.QueryRowContext(ctx, "SELECT "+
		"(SELECT count(*) FROM ("+steps+") c WHERE NOT "+acked("p1")+" OR NOT "+acked("p2")+"), "+
		"(SELECT count(*) FROM "+t.qMarks+" WHERE (seq - 1) % 4 = 3), "+
		"(SELECT COALESCE(min(w), 0) FROM ("+waits+") x), "+
		"(SELECT COALESCE(max(w), 0) FROM ("+waits+") y)").
		Scan(&v.Early, &v.DHandlings, &v.MinGapUS, &v.MaxWaitUS)
	return v, err
}

// dropEdges drops the table's edges, which the soak's reset makes again.
func (t *soakTables) dropEdges(ctx context.Context, db *sql.DB) error {
	if !t.workflow {
		return nil
	}
	if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+t.d.Quote(dialect.DepsName(t.jobs))); err != nil {
		return fmt.Errorf("drop the edges of %s: %w", t.jobs, err)
	}
	return nil
}
