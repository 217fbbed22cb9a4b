package inbox

import (
	"context"
	"fmt"
	"slices"
	"strings"

	iclaim "github.com/sqlinbox/sqlinbox/internal/claim"
	"github.com/sqlinbox/sqlinbox/internal/claim/contract"
	"github.com/sqlinbox/sqlinbox/internal/claim/deps"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/internal/engine"
)

// After makes the published row wait for parents, rows of the same table
// given by id: it is not claimable until every parent has been acked (or
// parked, under IfParentParked(RunChild)). The row and its edges are
// written in the publish's transaction (PublishTx, or the parent's own
// HandleTx transaction, so a step's ack and its next step commit
// together); parents already gone (acked) count as acked, and a row whose
// parents are all gone is available at once. A parent parked meanwhile, or
// already, applies IfParentParked's policy.
//
// The table needs its table of edges, <table>_deps (create it with
// migrations.ApplyDependencies); a publish to a table without one fails
// with an error that says so. Each subscription of the table then releases
// the children of the rows it acks, in every claim form (see
// docs/workflows.md). Until then the row's state is StateWaiting.
//
// A step published After the handled row alone, in its HandleTx, is
// available at the commit: no release is waited for. On Postgres in the
// lease form, the first such step of the handler's own queue is written
// leased to the handler's subscription (its attempt counted), whose worker
// takes it once the transaction commits, with no claim.
//
// Default: no parents (the row is available as Delay and At say). Bound:
// positive ids, at most MaxParents; not with Delay or At (a waiting row's
// locked_until is the wait's).
func After(parents ...int64) PublishOption {
	return func(c *publishConfig) {
		c.after = append(slices.Clip(c.after), parents...)
		c.waits = true
	}
}

// MaxParents is the most parents After takes in one publish.
const MaxParents = 10000

// ParentPolicy is what a row published with After does when one of its
// parents is parked (see IfParentParked).
type ParentPolicy int

const (
	// ParkChild parks the row too, with a last error naming the parent
	// ("parent 1001 parked: <its error>"), and so on down to the row's own
	// children. The default.
	ParkChild ParentPolicy = dialect.PolicyPark
	// RunChild counts the parked parent as settled: the row runs once
	// every parent is acked or parked (ParentsFrom says how many were
	// which).
	RunChild ParentPolicy = dialect.PolicyRun
	// DeleteChild deletes the row (while it waits), and treats it as
	// parked for its own children.
	DeleteChild ParentPolicy = dialect.PolicyDelete
)

func (p ParentPolicy) String() string {
	switch p {
	case ParkChild:
		return "ParkChild"
	case RunChild:
		return "RunChild"
	case DeleteChild:
		return "DeleteChild"
	}
	return fmt.Sprintf("ParentPolicy(%d)", int(p))
}

// IfParentParked sets what a row published with After does when a parent
// is parked: ParkChild (the default), RunChild or DeleteChild. The policy
// is kept with each of the row's edges. Unparking a parent later does not
// bring back the children its park parked or deleted. Bound: one of the
// three; only with After.
func IfParentParked(p ParentPolicy) PublishOption {
	return func(c *publishConfig) { c.policy, c.policySet = p, true }
}

// Parents is what a row's parents did, as ParentsFrom reads it.
type Parents struct {
	Acked  int // parents acked (or gone at the publish)
	Parked int // parents parked, or deleted by their own parent's policy
}

type parentsKey struct{}

// parentsOf is what ParentsFrom reads: the handled row and where, or
// what was read before the handler ran (eager).
type parentsOf struct {
	b     *Broker
	sql   *dialect.DepsSQL
	id    int64
	eager bool
	p     Parents
	ok    bool
}

// ParentsFrom reads what the parents of the row handled under ctx did: it
// returns false when the row has no parents, when its table has no edges
// (migrations.ApplyDependencies), and when the read failed (logged). It
// reads the row's edges, one statement, on each call: batches of 10,000
// parents read one count per state.
func ParentsFrom(ctx context.Context) (Parents, bool) {
	p, ok := ctx.Value(parentsKey{}).(*parentsOf)
	if !ok {
		return Parents{}, false
	}
	if p.eager {
		return p.p, p.ok
	}
	return p.read(ctx)
}

// read counts the row's edges by state.
func (p *parentsOf) read(ctx context.Context) (Parents, bool) {
	c := p.sql.Count(p.id)
	rows, err := p.b.db.QueryContext(ctx, c.SQL, c.Args...)
	if err != nil {
		p.b.log.Warn("inbox: could not read a row's parents", "id", p.id, "err", err)
		return Parents{}, false
	}
	defer rows.Close()
	var out Parents
	any := false
	for rows.Next() {
		var state, n int
		if err := rows.Scan(&state, &n); err != nil {
			p.b.log.Warn("inbox: could not read a row's parents", "id", p.id, "err", err)
			return Parents{}, false
		}
		any = true
		switch state {
		case dialect.EdgeAcked:
			out.Acked += n
		case dialect.EdgeFailed:
			out.Parked += n
		}
	}
	return out, any && rows.Err() == nil
}

// checkAfter refuses a publish's After and IfParentParked out of bounds.
func (c *publishConfig) checkAfter(table string) error {
	if !c.waits {
		if c.policySet {
			return fmt.Errorf("inbox: publish to %q: %w: IfParentParked(%v) without After: give the parents with After", table, ErrInvalid, c.policy)
		}
		return nil
	}
	switch {
	case len(c.after) == 0:
		return fmt.Errorf("inbox: publish to %q: %w: After() with no parent: give at least one id, or leave After out", table, ErrInvalid)
	case len(c.after) > MaxParents:
		return fmt.Errorf("inbox: publish to %q: %w: After with %d parents; at most %d", table, ErrInvalid, len(c.after), MaxParents)
	case c.delay != 0 || !c.at.IsZero():
		return fmt.Errorf("inbox: publish to %q: %w: After with Delay or At: a row that waits for parents is available once they are settled; leave Delay and At out", table, ErrInvalid)
	case c.policy < ParkChild || c.policy > DeleteChild:
		return fmt.Errorf("inbox: publish to %q: %w: IfParentParked(%v): give ParkChild, RunChild or DeleteChild", table, ErrInvalid, c.policy)
	}
	for _, p := range c.after {
		if p <= 0 {
			return fmt.Errorf("inbox: publish to %q: %w: After(%d): parent ids are positive", table, ErrInvalid, p)
		}
	}
	return nil
}

// tableDeps is what a broker knows of one table's edges.
type tableDeps struct {
	known, exists bool
	sqls          map[string]*dialect.DepsSQL // by publish shape (table check: "")
}

// depsOf is the broker's record of table's edges. The caller holds b.mu.
func (b *Broker) depsOf(table string) *tableDeps {
	if b.deps == nil {
		b.deps = map[string]*tableDeps{}
	}
	td, ok := b.deps[table]
	if !ok {
		td = &tableDeps{sqls: map[string]*dialect.DepsSQL{}}
		b.deps[table] = td
	}
	return td
}

// hasDeps reads (once while it is missing, then for good once found)
// whether table has its table of edges.
func (b *Broker) hasDeps(ctx context.Context, catalog dialect.Querier, table string) (bool, error) {
	b.mu.Lock()
	td := b.depsOf(table)
	exists := td.exists
	b.mu.Unlock()
	if exists {
		return true, nil
	}
	cols, err := b.d.Columns(ctx, catalog, dialect.DepsName(table))
	if err != nil {
		return false, fmt.Errorf("inbox: table %q: look for its edges %q: %w", table, dialect.DepsName(table), err)
	}
	b.mu.Lock()
	td.known, td.exists = true, len(cols) > 0
	b.mu.Unlock()
	return len(cols) > 0, nil
}

// publishDepsSQL is the statements a publish to table of shape s runs on
// its edges, or an error naming migrations.ApplyDependencies.
func (b *Broker) publishDepsSQL(ctx context.Context, catalog dialect.Querier, table string, s *shape, tm dialect.Times) (*dialect.DepsSQL, error) {
	ok, err := b.hasDeps(ctx, catalog, table)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, &TableError{Table: dialect.DepsName(table), Problem: fmt.Sprintf("does not exist: it keeps the edges of rows of %q that wait for others (inbox.After)", table),
			Fix: fmt.Sprintf("migrations.ApplyDependencies(ctx, db, %q, %q)", table, s.column(RoleID))}
	}
	key := s.typ.String()
	b.mu.Lock()
	defer b.mu.Unlock()
	td := b.depsOf(table)
	if q, ok := td.sqls[key]; ok {
		return q, nil
	}
	d := b.d
	t := dialect.Table{Name: d.Quote(table), ID: d.Quote(s.column(RoleID)), LockedUntil: d.Quote(s.column(RoleLockedUntil)), LastError: quoteOpt(d, s.column(RoleLastError))}
	q := d.Deps(t, tm)
	td.sqls[key] = q
	return q, nil
}

// waitFor writes the edges of child, just published in a transaction
// (query, and exec where the driver has it), to the parents cfg names,
// and settles what the parents' states decide at once (see After).
func waitFor(q *dialect.DepsSQL, child int64, cfg *publishConfig, query queryFunc, exec execFunc) error {
	parents := slices.Clone(cfg.after)
	slices.Sort(parents)
	parents = slices.Compact(parents)
	if cfg.acksParents() {
		// Written available: its one parent's ack commits with it.
		if err := run(q.AddAckedEdge(child, int(cfg.policy), parents[0]), query, exec); err != nil {
			return err
		}
		cfg.handedOff()
		return nil
	}
	type found struct {
		parked  bool
		lastErr string
	}
	byID := make(map[int64]found, len(parents))
	c := q.ReadParents(parents)
	rows, err := query(c.SQL, c.Args...)
	if err != nil {
		return fmt.Errorf("read its parents: %w", err)
	}
	for rows.Next() {
		var id int64
		var parked int
		var f found
		if err := rows.Scan(&id, &parked, &f.lastErr); err != nil {
			rows.Close()
			return fmt.Errorf("read its parents: %w", err)
		}
		f.parked = parked == 1
		byID[id] = f
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read its parents: %w", err)
	}
	edges := make([]dialect.ParentEdge, 0, len(parents))
	pending := 0
	var failed []string
	for _, p := range parents {
		f, ok := byID[p]
		switch {
		case !ok || p == cfg.ackedInTx:
			edges = append(edges, dialect.ParentEdge{Parent: p, State: dialect.EdgeAcked})
		case f.parked:
			edges = append(edges, dialect.ParentEdge{Parent: p, State: dialect.EdgeFailed})
			failed = append(failed, fmt.Sprintf("parent %d parked: %s", p, f.lastErr))
		default:
			edges = append(edges, dialect.ParentEdge{Parent: p, State: dialect.EdgePending})
			pending++
		}
	}
	if len(failed) > 0 && cfg.policy == DeleteChild {
		return run(q.DeleteNow(child), query, exec)
	}
	if err := run(q.AddEdges(child, int(cfg.policy), edges), query, exec); err != nil {
		return fmt.Errorf("write its edges: %w", err)
	}
	switch {
	case len(failed) > 0 && cfg.policy == ParkChild:
		return run(q.ParkNow(child, strings.Join(failed, "; ")), query, exec)
	case pending == 0:
		return run(q.Ready(child), query, exec)
	}
	return nil
}

// acksParents says the publish's transaction acks every parent After
// names (the handler's own row, in its HandleTx): nothing to read or wait
// for.
func (c *publishConfig) acksParents() bool {
	if c.ackedInTx == 0 {
		return false
	}
	for _, p := range c.after {
		if p != c.ackedInTx {
			return false
		}
	}
	return true
}

// adoptTo is the subscription a step to table and group is written leased
// to: the handler's own where it can take one (see adoptable) and the step
// is of its queue and the handling's first; nil otherwise.
func (c *publishConfig) adoptTo(table, group string) *adoptable {
	if c.handOff == nil || c.handOff.step != nil {
		return nil
	}
	if to := c.handOff.to; to != nil && to.table == table && to.group == group {
		return to
	}
	return nil
}

// writeStep writes a step After the handled row alone with its edge
// (dialect.Insert.HandOff), leased to the handler's subscription where to
// is set, which then takes it at the commit, and returns its id.
func (c *publishConfig) writeStep(table string, call dialect.Call, to *adoptable, queryRow func(string, ...any) scanner) (int64, error) {
	var id int64
	if to != nil {
		j, err := to.adopter.Adopt(queryRow(call.SQL, call.Args...).Scan)
		if err != nil {
			return 0, fmt.Errorf("inbox: publish to %q: %w", table, err)
		}
		c.handOff.step, id = j, j.ID
	} else if err := queryRow(call.SQL, call.Args...).Scan(&id); err != nil {
		return 0, fmt.Errorf("inbox: publish to %q: %w", table, err)
	}
	c.handedOff()
	return id, nil
}

// handedOff records that a row After the handler's own row alone was
// written in its transaction (see handOff.written).
func (c *publishConfig) handedOff() {
	if c.handOff != nil {
		c.handOff.written.Store(true)
	}
}

// waits says opts hold After.
func waits(opts []PublishOption) bool {
	var cfg publishConfig
	for _, o := range opts {
		o(&cfg)
	}
	return cfg.waits
}

// publishWaits is waitFor for a publish of one row.
func publishWaits(q *dialect.DepsSQL, table string, child int64, cfg *publishConfig, query queryFunc, exec execFunc) error {
	if query == nil {
		return fmt.Errorf("inbox: publish to %q with After: %w: this transaction's driver cannot read rows back; use a *sql.Tx", table, ErrInvalid)
	}
	if err := waitFor(q, child, cfg, query, exec); err != nil {
		return fmt.Errorf("inbox: publish to %q: row %d waits for its parents: %w", table, child, err)
	}
	return nil
}

// run runs a statement that returns nothing, with exec, or with query
// where the driver has no exec (pgx).
func run(c dialect.Call, query queryFunc, exec execFunc) error {
	if exec != nil {
		_, err := exec(c.SQL, c.Args...)
		return err
	}
	rows, err := query(c.SQL, c.Args...)
	if err != nil {
		return err
	}
	rows.Close()
	return rows.Err()
}

// checkDeps makes the subscription's releaser when its table has edges;
// without them it adds nothing.
func (s *Subscription) checkDeps(ctx context.Context, t iclaim.Table) error {
	ok, err := s.b.hasDeps(ctx, s.b.db, s.table)
	if err != nil || !ok {
		return err
	}
	channel := ""
	if s.b.notifies {
		channel = s.table
	}
	q := s.b.d.Deps(t.Table, t.Times)
	s.depsSQL = q
	s.releaser = deps.New(deps.Config{DB: s.b.db, SQL: q, Writer: s.b.writer, Clock: s.b.clock, Table: s.table,
		Released: s.b.releasedFunc(s.table, channel), Sweep: depsSweepPolls * s.b.poll, Log: s.b.log.With("subscription", s.cfg.name), Conflict: s.b.d.Conflict})
	return nil
}

// depsSweepPolls is the time between a table's sweeps for
// edges a crash stranded (see deps.Releaser.Sweep), in poll intervals:
// 5 s at the default poll.
const depsSweepPolls = 5

// releasedFunc wakes table's subscriptions once rows waiting there were
// released: in this process, and with notifications on (channel not ""),
// every process.
func (b *Broker) releasedFunc(table, channel string) func() {
	return func() {
		b.hub.Wake(table, "")
		if channel == "" {
			return
		}
		n := b.d.Notify()
		if n.SQL() == "" {
			return
		}
		q := n.Call(channel, "")
		ctx, cancel := context.WithTimeout(context.Background(), contract.SettleTimeout)
		defer cancel()
		if _, err := b.db.ExecContext(ctx, q.SQL, q.Args...); err != nil {
			b.log.Warn("inbox: could not notify that rows waiting for others were released; other processes claim them at their poll", "table", table, "err", err)
		}
	}
}

// depsClaims is the claim middleware of a subscription whose table has
// edges: each claimed job's settler releases its children (see
// deps.Releaser). Stranded edges are swept by the table's sweep
// (depssweep.go), not by claims.
func (s *Subscription) depsClaims() engine.ClaimMiddleware {
	r := s.releaser
	return func(ctx context.Context, max int, next engine.ClaimFunc) ([]*contract.Job, error) {
		jobs, err := next(ctx, max)
		r.Wrap(jobs)
		return jobs, err
	}
}

// withParents gives the handler's context what ParentsFrom reads.
func (s *Subscription) withParents(handle func(context.Context, *contract.Job) error) func(context.Context, *contract.Job) error {
	// On SQLite a transactional handler holds the one write lock, which a
	// read on another connection would wait for: its parents are read
	// before its transaction begins.
	eager := s.b.d.Kind == dialect.SQLite && s.handleJob != nil
	return func(ctx context.Context, j *contract.Job) error {
		p := &parentsOf{b: s.b, sql: s.depsSQL, id: j.ID}
		if eager {
			p.p, p.ok = p.read(ctx)
			p.eager = true
		}
		return handle(context.WithValue(ctx, parentsKey{}, p), j)
	}
}
