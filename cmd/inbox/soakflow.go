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

// With --workflow batches, the producer publishes --jobs batches, each ten
// rows and their callback in one transaction (inbox.PublishBatchTx, the
// callback in the rows' queue): row n is row (n-1) % 11 of batch
// (n+10) / 11, the eleventh its callback. Rows whose sequence number is 3
// modulo 10 return inbox.Park, after writing a park record (the batch
// table) on the marks' pool: a time just before the park commits. The
// callback writes what inbox.ParentsFrom read in the batch table, in its
// transaction. The verdict asks that every callback was acked exactly once,
// that none began before each of its rows had an ack or a park record
// (early_callbacks), and that its counts are the batch's (wrong_counts).

// The workflows the soak knows.
const (
	soakDiamonds = "diamonds"
	soakBatches  = "batches"
)

// flowUnit is how many rows one unit of a workflow is: a diamond's four, a
// batch's ten and its callback.
func flowUnit(workflow string) int64 {
	switch workflow {
	case soakDiamonds:
		return 4
	case soakBatches:
		return 11
	}
	return 1
}

// rows is how many rows the producer writes: whole units in the workflow
// mode.
func (c *soakConfig) rows() int64 { return flowUnit(c.workflow) * c.jobs }

// isCallback says whether row seq of the batches is a callback, and
// parks whether it is one the handler parks.
func isCallback(seq int64) bool { return seq%11 == 0 }
func parks(seq int64) bool      { return !isCallback(seq) && seq%10 == 3 }

// notParked is the filter of the rows the drain waits for: in the batches,
// parked rows stay in the table.
func (t *soakTables) notParked() string {
	if !t.batches {
		return ""
	}
	return " WHERE locked_until IS NULL OR locked_until < '9000-01-01'"
}

// batchTable is the batches' table of park records and callbacks' counts.
func batchTable(table string) string { return table + "_batch" }

// makeBatchTable makes the batch table afresh.
func makeBatchTable(ctx context.Context, db *sql.DB, d *dialect.Dialect, table string) error {
	q := d.Quote(batchTable(table))
	for _, s := range []string{"DROP TABLE IF EXISTS " + q,
		"CREATE TABLE " + q + " (seq bigint NOT NULL, acked bigint NOT NULL, parked bigint NOT NULL, at_us bigint NOT NULL)"} {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("make the batch table: %w", err)
		}
	}
	return nil
}

// batchHandler handles a row of the batches in tx (see above); the marks
// go through h.db, as the diamonds' do.
func (h *soakHandler) batchHandler(d *dialect.Dialect, table, sent string) inbox.TxHandler[referenceRow] {
	record := d.Rebind("INSERT INTO " + d.Quote(batchTable(table)) + " (seq, acked, parked, at_us) VALUES ($1, $2, $3, " + nowUSOf(d) + ")")
	return func(ctx context.Context, tx *sql.Tx, row referenceRow) error {
		if err := h.handle(ctx, h.db, row.Payload, noMark); err != nil {
			return err
		}
		seq, err := seqOf(row.Payload)
		if err != nil {
			return err
		}
		switch {
		case parks(seq):
			if _, err := h.db.ExecContext(ctx, record, seq, 0, 1); err != nil {
				return err
			}
			return inbox.Park(fmt.Errorf("row %d: the soak parks one row in ten", seq))
		case isCallback(seq):
			p, ok := inbox.ParentsFrom(ctx)
			if !ok {
				p = inbox.Parents{Acked: -1, Parked: -1}
			}
			if _, err := tx.ExecContext(ctx, record, seq, p.Acked, p.Parked); err != nil {
				return err
			}
		}
		return h.effect(ctx, tx, row, sent)
	}
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

// flowProducer publishes diamonds or batches through a broker.
type flowProducer struct {
	b        *inbox.Broker
	q        inbox.Queue[referenceRow]
	workflow string
}

func newFlowProducer(url, table, workflow string) (*flowProducer, error) {
	q, err := inbox.NewQueue[referenceRow](table)
	if err != nil {
		return nil, err
	}
	b, err := inbox.Open(url, inbox.MaxConns(2))
	if err != nil {
		return nil, err
	}
	return &flowProducer{b: b, q: q, workflow: workflow}, nil
}

// publish publishes rows from..to, whole diamonds or batches, and records
// them, in one transaction; with hold it says so on stdout and holds the
// transaction open, for the soak to kill it there.
func (p *flowProducer) publish(ctx context.Context, record string, from, to int64, hold bool) error {
	tx, err := p.b.DB().BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if p.workflow == soakBatches {
		for a := from; a+10 <= to; a += 11 {
			rows := make([]referenceRow, 10)
			for i := range rows {
				rows[i].Payload = soakPayload(a + int64(i))
			}
			if _, err := inbox.PublishBatchTx(ctx, p.b, tx, p.q, rows, p.q, referenceRow{Payload: soakPayload(a + 10)}); err != nil {
				return err
			}
		}
		return commitBatch(ctx, tx, record, from, to, hold)
	}
	row := func(seq int64, opts ...inbox.PublishOption) (int64, error) {
		return inbox.PublishTx(ctx, p.b, tx, p.q, referenceRow{Payload: soakPayload(seq)}, opts...)
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

// soakPayload is row seq's payload.
func soakPayload(seq int64) []byte { return []byte(strconv.FormatInt(seq, 10)) }

// workflowVerdict is the workflow mode's part of the verdict: the fields it
// adds to the soak's line, and what fails the run.
func (r *soakRun) workflowVerdict(ctx context.Context) (string, []string, error) {
	if r.c.workflow == soakBatches {
		return r.batchVerdict(ctx)
	}
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

// batchVerdict is workflowVerdict for the batches.
func (r *soakRun) batchVerdict(ctx context.Context) (string, []string, error) {
	t := r.t
	sent, rec := t.d.Quote(sentTable(t.jobs)), t.d.Quote(batchTable(t.jobs))
	sentOf := func(seq string) string { return "(SELECT count(*) FROM " + sent + " s WHERE s.seq = " + seq + ")" }
	parkedRec := func(seq string) string {
		return "EXISTS (SELECT 1 FROM " + rec + " b WHERE b.seq = " + seq + " AND b.parked = 1 AND b.seq % 11 <> 0)"
	}
	// A row of the batch (seq r) settled by a callback's start: an ack, or
	// a park record, at or before it.
	settled := "(EXISTS (SELECT 1 FROM " + sent + " s WHERE s.seq = r.seq AND s.at_us <= m.start_us) OR EXISTS (SELECT 1 FROM " +
		rec + " b WHERE b.seq = r.seq AND b.parked = 1 AND b.at_us <= m.start_us))"
	early := "SELECT count(*) FROM " + t.qMarks + " m WHERE m.seq % 11 = 0 AND EXISTS (SELECT 1 FROM " + t.qProduced +
		" r WHERE r.seq BETWEEN m.seq - 10 AND m.seq - 1 AND NOT " + settled + ")"
	// The batch's real counts: rows acked (a sent row), rows parked (a park
	// record and no sent row).
	inBatch := func(cond string) string {
		return "(SELECT count(*) FROM " + t.qProduced + " r WHERE r.seq BETWEEN c.seq - 10 AND c.seq - 1 AND " + cond + ")"
	}
	acked, parked := inBatch(sentOf("r.seq")+" > 0"), inBatch(sentOf("r.seq")+" = 0 AND "+parkedRec("r.seq"))
	wrong := "SELECT count(*) FROM " + rec + " c WHERE c.seq % 11 = 0 AND (c.acked <> " + acked + " OR c.parked <> " + parked + ")"
	var cbNotOnce, rowsWrong, earlyN, wrongCounts, parkedRows int64
	err := r.db.QueryRowContext(ctx, "SELECT "+
		"(SELECT count(*) FROM "+t.qProduced+" p WHERE p.seq % 11 = 0 AND "+sentOf("p.seq")+" <> 1), "+
		"(SELECT count(*) FROM "+t.qProduced+" p WHERE p.seq % 11 <> 0 AND (CASE WHEN p.seq % 10 = 3 THEN "+sentOf("p.seq")+" <> 0 OR NOT "+parkedRec("p.seq")+" ELSE "+sentOf("p.seq")+" <> 1 END)), "+
		"("+early+"), ("+wrong+"), "+
		"(SELECT count(DISTINCT seq) FROM "+rec+" WHERE parked = 1 AND seq % 11 <> 0)").
		Scan(&cbNotOnce, &rowsWrong, &earlyN, &wrongCounts, &parkedRows)
	if err != nil {
		return "", nil, err
	}
	line := fmt.Sprintf(" workflow=%s batches=%d callbacks_not_once=%d rows_not_settled_once=%d early_callbacks=%d wrong_counts=%d parked_rows=%d",
		r.c.workflow, r.c.jobs, cbNotOnce, rowsWrong, earlyN, wrongCounts, parkedRows)
	var why []string
	for _, f := range []struct {
		n    int64
		what string
	}{{cbNotOnce, "callbacks not acked exactly once"}, {rowsWrong, "rows of batches not acked once (or parked, for the parked ones)"},
		{earlyN, "handlings of a callback began before every row of its batch was settled"}, {wrongCounts, "callbacks read counts other than their batch's"}} {
		if f.n > 0 {
			why = append(why, fmt.Sprintf("%d %s", f.n, f.what))
		}
	}
	return line, why, nil
}
