package inbox

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"os"
	"strings"
	"sync"
	"time"

	iclaim "github.com/sqlinbox/sqlinbox/internal/claim"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// History keeps the subscription's acked rows for retention: an ack moves
// the row into the table's history, <table>_history, instead of deleting
// it, with when it was handled (handled_at), by which instance
// (handled_by, host:pid) and how long since its claim (duration_us); its
// attempts and last error are its own columns'. The move is fenced as the
// ack is: an ack whose lease was lost moves nothing. Rows older than
// retention are pruned in batches of a few hundred, by the instances that
// run such a subscription.
//
// While a key's row is in the history, a publish with that key returns
// ErrDuplicate with the acked row's id, as it does while the row is queued
// (publishes through the library; see docs/history.md).
//
// The history table has the inbox table's columns and three more; Run's
// table check says when it is missing and prints its DDL
// (migrations.ApplyHistory creates it too).
// Default: no history (acks delete). Bound: retention positive.
func History(retention time.Duration) SubOption {
	return func(c *subConfig) error {
		if retention <= 0 {
			return fmt.Errorf("inbox: %w: History(%v): retention must be positive", ErrInvalid, retention)
		}
		c.history = retention
		return nil
	}
}

// tableHistory is what a broker knows of one table's history.
type tableHistory struct {
	known  bool // exists was read from the catalog, or set by a check
	exists bool // the table has a history
	sql    *dialect.HistorySQL
	prune  *pruner
}

// instanceName is what a history records as the instance that handled a
// row: host:pid.
var instanceName = sync.OnceValue(func() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s:%d", host, os.Getpid())
})

// history is the broker's record of table's history, made on first use.
// The caller holds b.mu.
func (b *Broker) history(table string) *tableHistory {
	if b.histories == nil {
		b.histories = map[string]*tableHistory{}
	}
	h, ok := b.histories[table]
	if !ok {
		h = &tableHistory{}
		b.histories[table] = h
	}
	return h
}

// checkHistory checks the history table of t (see History) and returns
// what an ack moves there: every column of the inbox table.
func checkHistory(ctx context.Context, b *Broker, table string, s *shape, t iclaim.Table) (*iclaim.History, error) {
	d := b.d
	name := dialect.HistoryName(table)
	if err := dialect.CheckTableName(name); err != nil {
		return nil, fmt.Errorf("inbox: table %q: its history: %w", table, err)
	}
	cols, err := d.Columns(ctx, b.db, table)
	if err != nil {
		return nil, fmt.Errorf("inbox: table %q: %w", table, err)
	}
	have, err := d.Columns(ctx, b.db, name)
	if err != nil {
		return nil, fmt.Errorf("inbox: table %q: %w", name, err)
	}
	if len(have) == 0 {
		return nil, tableError(name, []TableProblem{{
			Problem: fmt.Sprintf("does not exist: it keeps the acked rows of %q (inbox.History)", table),
			Fix:     strings.Join(d.HistoryDDL(table, cols, s.column(RoleID), s.column(RoleLockedUntil), s.column(RoleKey)), ";\n")}})
	}
	byName := map[string]bool{}
	for _, c := range have {
		byName[c.Name] = true
	}
	want := append(cols[:len(cols):len(cols)],
		dialect.Column{Name: dialect.HandledAtColumn, Type: historyType(d, cols, s.column(RoleLockedUntil))},
		dialect.Column{Name: dialect.HandledByColumn, Type: "text"},
		dialect.Column{Name: dialect.DurationColumn, Type: "bigint"})
	var problems []TableProblem
	h := dialect.HistoryTable{Name: d.Quote(name)}
	for i, c := range want {
		if !byName[c.Name] {
			problems = append(problems, TableProblem{Column: c.Name, Problem: fmt.Sprintf("is missing (the history keeps every column of %q, and when, by whom and how long)", table),
				Fix: fmt.Sprintf("ALTER TABLE %s ADD COLUMN %s %s", d.Quote(name), d.Quote(c.Name), c.Type)})
		}
		if i < len(cols) {
			h.Columns = append(h.Columns, d.Quote(c.Name))
		}
	}
	if len(problems) > 0 {
		return nil, tableError(name, problems)
	}
	b.mu.Lock()
	th := b.history(table)
	th.known, th.exists = true, true
	if th.sql == nil {
		th.sql = d.History(t.Table, t.Times, h, quoteOpt(d, s.column(RoleKey)))
	}
	sql := th.sql
	b.mu.Unlock()
	return &iclaim.History{SQL: sql, Instance: instanceName()}, nil
}

// historyType is the type of handled_at: the lease column's.
func historyType(d *dialect.Dialect, cols []dialect.Column, lu string) string {
	for _, c := range cols {
		if c.Name == lu {
			return c.Type
		}
	}
	return "timestamptz"
}

// pruner deletes a table's history rows older than the longest retention
// its running subscriptions keep, while any runs.
type pruner struct {
	refs      map[*Subscription]time.Duration
	stop      context.CancelFunc
	done      chan struct{}
	rounds    chan struct{} // a round ended (tests wait on it); never blocks
	retention time.Duration
}

// pruneEvery is how often a table's history is pruned: a tenth of its
// retention, between a second and a minute.
func pruneEvery(retention time.Duration) time.Duration {
	return min(max(retention/10, time.Second), time.Minute)
}

// startPrune counts s among the subscriptions that keep t's history and
// starts its pruner if none ran; the returned function uncounts s.
func (b *Broker) startPrune(s *Subscription, h *iclaim.History) func() {
	b.mu.Lock()
	defer b.mu.Unlock()
	th := b.history(s.table)
	p := th.prune
	if p == nil {
		ctx, stop := context.WithCancel(context.Background())
		p = &pruner{refs: map[*Subscription]time.Duration{}, stop: stop, done: make(chan struct{}), rounds: make(chan struct{}, 1)}
		th.prune = p
		go b.pruneLoop(ctx, s.table, h.SQL.Prune, p)
	}
	p.refs[s] = s.cfg.history
	p.retention = max(p.retention, s.cfg.history)
	return func() {
		b.mu.Lock()
		delete(p.refs, s)
		last := len(p.refs) == 0
		if last {
			th.prune = nil
		} else {
			p.retention = 0
			for _, r := range p.refs {
				p.retention = max(p.retention, r)
			}
		}
		b.mu.Unlock()
		if last {
			p.stop()
			<-p.done
		}
	}
}

// pruneLoop prunes at once, then every pruneEvery, until ctx ends.
func (b *Broker) pruneLoop(ctx context.Context, table string, q dialect.PruneSQL, p *pruner) {
	defer close(p.done)
	log := b.log.With("table", table)
	for {
		b.mu.Lock()
		retention := p.retention
		b.mu.Unlock()
		if err := b.pruneOnce(ctx, q, b.clock.Now().Add(-retention)); err != nil && ctx.Err() == nil {
			log.Warn("inbox: could not prune the history; trying again at the next round", "history", dialect.HistoryName(table), "err", err)
		}
		select {
		case p.rounds <- struct{}{}:
		default:
		}
		t := b.clock.NewTimer(pruneEvery(retention))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}

// pruneOnce deletes history rows handled before before, a batch a
// statement, each committed on its own so no lock is held long, until a
// batch comes back short.
func (b *Broker) pruneOnce(ctx context.Context, q dialect.PruneSQL, before time.Time) error {
	call := q.Call(before)
	for ctx.Err() == nil {
		if err := b.writer.Lock(ctx); err != nil {
			return err
		}
		res, err := b.db.ExecContext(ctx, call.SQL, call.Args...)
		b.writer.Unlock()
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n < dialect.PruneBatch {
			return err
		}
	}
	return ctx.Err()
}

// reservation looks a publish's keys up in a table's history and takes
// back the rows a publish wrote whose keys it found there (see History).
type reservation struct {
	byKey     dialect.ByKeySQL
	unpublish dialect.UnpublishSQL
}

// reservation is table's, nil when the table keeps no history: read from
// the catalog at its first keyed publish (or set by a subscription's
// check). A history made later is seen by a broker opened after it, or
// once a subscription of the table with History starts.
func (b *Broker) reservation(ctx context.Context, catalog dialect.Querier, table string, s *shape) (*reservation, error) {
	b.mu.Lock()
	th := b.history(table)
	known, exists := th.known, th.exists
	b.mu.Unlock()
	if !known {
		cols, err := b.d.Columns(ctx, catalog, dialect.HistoryName(table))
		if err != nil {
			return nil, fmt.Errorf("inbox: publish to %q: look for its history: %w", table, err)
		}
		exists = len(cols) > 0
		b.mu.Lock()
		th.known, th.exists = true, th.exists || exists
		exists = th.exists
		b.mu.Unlock()
	}
	if !exists {
		return nil, nil
	}
	d := b.d
	return &reservation{byKey: d.HistoryByKey(d.Quote(dialect.HistoryName(table)), d.Quote(s.column(RoleID)), d.Quote(s.column(RoleKey))),
		unpublish: d.Unpublish(d.Quote(table), d.Quote(s.column(RoleID)))}, nil
}

// lookUp reads the ids of keys in the history.
func (r *reservation) lookUp(keys []string, query queryFunc) (map[string]int64, error) {
	q := r.byKey.Call(keys)
	rs, err := query(q.SQL, q.Args...)
	if err != nil {
		return nil, fmt.Errorf("look up keys in the history: %w", err)
	}
	defer rs.Close()
	out := map[string]int64{}
	for rs.Next() {
		var id int64
		var key string
		if err := rs.Scan(&id, &key); err != nil {
			return nil, err
		}
		out[key] = id
	}
	return out, rs.Err()
}

// take deletes rows ids, written in this transaction, whose keys the
// history holds.
func (r *reservation) take(ids []int64, query queryFunc, exec execFunc) error {
	q := r.unpublish.Call(ids)
	if !r.unpublish.Returns() {
		_, err := exec(q.SQL, q.Args...)
		return err
	}
	rs, err := query(q.SQL, q.Args...)
	if err != nil {
		return err
	}
	for rs.Next() {
	}
	rs.Close()
	return rs.Err()
}

// reserved checks a keyed publish's rows, written in this transaction,
// against the history: rows whose keys it holds are taken back, and their
// keys returned with the history's ids.
func (r *reservation) reserved(written map[string]int64, query queryFunc, exec execFunc) (map[string]int64, error) {
	if r == nil || len(written) == 0 {
		return nil, nil
	}
	keys := make([]string, 0, len(written))
	for k := range written {
		keys = append(keys, k)
	}
	kept, err := r.lookUp(keys, query)
	if err != nil || len(kept) == 0 {
		return nil, err
	}
	ids := make([]int64, 0, len(kept))
	for k := range kept {
		ids = append(ids, written[k])
	}
	if err := r.take(ids, query, exec); err != nil {
		return nil, fmt.Errorf("take back rows whose keys the history holds: %w", err)
	}
	return kept, nil
}

// reserveBatch checks a batch's written rows (got) against the history
// (r nil: no history): it returns the rows left written and the keys the
// history holds, whose rows were taken back.
func reserveBatch(r *reservation, got []returned, query queryFunc, exec execFunc) ([]returned, map[string]int64, error) {
	if r == nil {
		return got, nil, nil
	}
	written := map[string]int64{}
	for _, g := range got {
		if g.key.Valid {
			written[g.key.String] = g.id
		}
	}
	kept, err := r.reserved(written, query, exec)
	if err != nil || len(kept) == 0 {
		return got, kept, err
	}
	left := got[:0:0]
	for _, g := range got {
		if _, ok := kept[g.key.String]; !ok || !g.key.Valid {
			left = append(left, g)
		}
	}
	return left, kept, nil
}

func mergeKept(a, b map[string]int64) map[string]int64 {
	if a == nil {
		return b
	}
	maps.Copy(a, b)
	return a
}

// StateDone is the state of a row acked and kept in its table's history
// (History): Operator.Rows lists done rows alone.
const StateDone = "done"

// listDone lists ref's done rows: its table's history, filtered by rf.
func (o *Operator) listDone(ctx context.Context, ref QueueRef, t dialect.AdminTable, rf RowFilter) ([]Row, error) {
	d := o.b.d
	f := dialect.HistoryFilter{AdminFilter: o.filter(ref), Key: rf.Key, From: rf.HandledFrom, To: rf.HandledBefore}
	f.IDs, f.ErrorContains = rf.IDs, rf.ErrorContains
	if k := ref.Roles[RoleKey]; k != "" {
		f.KeyColumn = d.Quote(k)
	}
	limit := rf.Limit
	if limit <= 0 {
		limit = 100
	}
	name := dialect.HistoryName(ref.Table)
	q, err := d.ListHistory(t, d.Quote(name), f, limit)
	if err != nil {
		return nil, fmt.Errorf("inbox: done rows of %q: %w", ref.Table, err)
	}
	rows, err := o.b.db.QueryContext(ctx, q.SQL, q.Args...)
	if err != nil {
		return nil, fmt.Errorf("inbox: done rows of %q (its history %q; History keeps them): %w", ref.Table, name, err)
	}
	defer rows.Close()
	var out []Row
	for rows.Next() {
		r := Row{State: StateDone}
		var lu, created, handled any
		var lastErr sql.NullString
		var took int64
		if err := rows.Scan(&r.ID, &lu, &r.Attempts, &lastErr, &created, &r.Payload, &handled, &r.HandledBy, &took); err != nil {
			return nil, fmt.Errorf("inbox: done rows of %q: %w", ref.Table, err)
		}
		r.LastError, r.Took = lastErr.String, time.Duration(took)*time.Microsecond
		r.LockedUntil, _, _ = t.Times.Decode(lu)
		r.Created, _, _ = t.Times.Decode(created)
		r.Handled, _, _ = t.Times.Decode(handled)
		out = append(out, r)
	}
	return out, rows.Err()
}
