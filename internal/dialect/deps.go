package dialect

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// The dependencies of an inbox table's rows (see inbox.After): a table of
// edges, <table>_deps, one row per child and parent. A child waits with
// locked_until at Waiting, which every claim passes over as it passes over
// a lease in the future; once each of its parents is settled (acked, or
// parked under a policy that runs the child), a release sets it to NULL.
//
// An edge's state says what its parent did: EdgePending while the parent
// is queued, EdgeAcked once it was acked (or was gone at the publish),
// EdgeFailed once it was parked (or deleted by a parent's policy). Edges
// stay until their child is acked, so a handler can read its parents'
// outcomes. Each statement's text is beside its Call.

// The columns of a table of edges.
const (
	DepsChildColumn  = "child_id"
	DepsParentColumn = "parent_id"
	DepsPolicyColumn = "policy"
	DepsStateColumn  = "state"
)

// DepsName is the table of edges of table: its name with "_deps" after it,
// in the same schema.
func DepsName(table string) string { return table + "_deps" }

// Waiting is the time written into a row that waits for its parents: far
// enough that no claim reaches it, before Never so a parked row stays
// apart from a waiting one.
var Waiting = time.Date(9000, 1, 1, 0, 0, 0, 0, time.UTC)

// The states of an edge.
const (
	EdgePending = 0
	EdgeAcked   = 1
	EdgeFailed  = 2
)

// The policies of an edge: what its child does when its parent is parked.
const (
	PolicyPark   = 0
	PolicyRun    = 1
	PolicyDelete = 2
)

// ParentEdge is one edge a publish writes: its parent and its state.
type ParentEdge struct {
	Parent int64
	State  int
}

// DepsSQL is what publishes and settlements run on a table with edges.
type DepsSQL struct {
	kind      Kind
	tm        Times
	lastError bool

	readParents, addEdges, ready, parkNow, deleteNow                      text
	releaseAll, markAcked, markAckedThen, dropChildren                    text
	unblock, unblockThen, markFailed, markFailedThen                      text
	parkWaiting, parkWaitingThen, deleteWaiting, deleteWaitingThen, count text
	stranded                                                              text
	addEdgesDrop, toRelease                                               text
	unheld, anyEdge                                                       text
}

// DepsDDL creates the edges of table, whose id column is of type idType.
func (d *Dialect) DepsDDL(table, idType string) []string {
	name := DepsName(table)
	small := "smallint"
	defs := []string{
		d.Quote(DepsChildColumn) + " " + idType + " NOT NULL",
		d.Quote(DepsParentColumn) + " " + idType + " NOT NULL",
		d.Quote(DepsPolicyColumn) + " " + small + " NOT NULL DEFAULT 0",
		d.Quote(DepsStateColumn) + " " + small + " NOT NULL DEFAULT 0",
		fmt.Sprintf("PRIMARY KEY (%s, %s)", d.Quote(DepsParentColumn), d.Quote(DepsChildColumn)),
	}
	// On (child, state): a release's check of a child with many parents
	// (a batch's callback) seeks its pending edges instead of walking its
	// acked ones. The name is the one the index on the child alone had: a
	// table made before keeps that one, which serves the same statements
	// (slower for such a child).
	index := bareName(name) + "_" + DepsChildColumn
	if d.Kind == MySQL {
		defs = append(defs, fmt.Sprintf("KEY %s (%s, %s)", d.Quote(index), d.Quote(DepsChildColumn), d.Quote(DepsStateColumn)))
		return []string{fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s (\n    %s\n) ENGINE=InnoDB", d.Quote(name), strings.Join(defs, ",\n    "))}
	}
	return []string{
		fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s (\n    %s\n)", d.Quote(name), strings.Join(defs, ",\n    ")),
		fmt.Sprintf("CREATE INDEX IF NOT EXISTS %s ON %s (%s, %s)", d.Quote(index), d.Quote(name), d.Quote(DepsChildColumn), d.Quote(DepsStateColumn)),
	}
}

// idsIn is the condition "col is one of the ids of parameter $n": an
// array on Postgres, a JSON array on SQLite, and on MySQL a list written
// out at the call (the ids are integers), where the text holds idsMark.
func (d *Dialect) idsIn(col string, n int) string {
	switch d.Kind {
	case Postgres:
		return fmt.Sprintf("%s = ANY($%d::bigint[])", col, n)
	case SQLite:
		return fmt.Sprintf("%s IN (SELECT value FROM json_each($%d))", col, n)
	}
	return col + " IN " + idsMark
}

// idsMark stands for a list of ids in a MySQL statement's text.
const idsMark = "(/*ids*/)"

// Deps writes the statements of table t's edges.
func (d *Dialect) Deps(t Table, tm Times) *DepsSQL {
	tm.InDatabase = false // Waiting and Never are fixed times
	e := d.Quote(DepsName(unquote(t.Name)))
	ch, pa, po, st := d.Quote(DepsChildColumn), d.Quote(DepsParentColumn), d.Quote(DepsPolicyColumn), d.Quote(DepsStateColumn)
	id, lu := t.ID, t.LockedUntil
	s := &DepsSQL{kind: d.Kind, tm: tm, lastError: t.LastError != ""}
	txt := func(q string) text { return d.text(q, tm) }
	lastErr := "''"
	if t.LastError != "" {
		lastErr = "COALESCE(" + t.LastError + ", '')"
	}
	lock := map[Kind]string{Postgres: " FOR KEY SHARE", MySQL: " LOCK IN SHARE MODE"}[d.Kind]
	// $1 the parents, $2 Never.
	s.readParents = txt(fmt.Sprintf("SELECT %s, CASE WHEN %s >= $2 THEN 1 ELSE 0 END, %s FROM %s WHERE %s%s", id, lu, lastErr, t.Name, d.idsIn(id, 1), lock))
	// $1 the child, $2 the policy, $3 the edges.
	switch d.Kind {
	case Postgres:
		s.addEdges = txt(fmt.Sprintf("INSERT INTO %s (%s, %s, %s, %s) SELECT $1, a.p, $2, a.s FROM unnest($3::bigint[], $4::smallint[]) AS a(p, s) ON CONFLICT DO NOTHING", e, ch, pa, po, st))
		// $5 the parent acked in this transaction, whose own edges go.
		s.addEdgesDrop = txt(fmt.Sprintf("WITH d AS (DELETE FROM %s WHERE %s = $5)\n%s", e, ch, s.addEdges.sql))
	case SQLite:
		s.addEdges = txt(fmt.Sprintf("INSERT OR IGNORE INTO %s (%s, %s, %s, %s) SELECT $1, json_extract(value, '$[0]'), $2, json_extract(value, '$[1]') FROM json_each($3)", e, ch, pa, po, st))
	default:
		s.addEdges = text{kind: d.Kind, sql: fmt.Sprintf("INSERT IGNORE INTO %s (%s, %s, %s, %s) VALUES ", e, ch, pa, po, st)}
	}
	// $1 the child, $2 Waiting.
	s.ready = txt(fmt.Sprintf("UPDATE %s SET %s = NULL WHERE %s = $1 AND %s = $2", t.Name, lu, id, lu))
	// $1 the child, $2 Never, $3 the last error.
	keep := ""
	if t.LastError != "" {
		keep = fmt.Sprintf(", %s = $3", t.LastError)
	}
	s.parkNow = txt(fmt.Sprintf("UPDATE %s SET %s = $2%s WHERE %s = $1", t.Name, lu, keep, id))
	// $1 the child.
	s.deleteNow = txt(fmt.Sprintf("DELETE FROM %s WHERE %s = $1", t.Name, id))
	// probe is a value of the table's row whose id is ref: the edges lead
	// and each row of the table is read by its id. It is a scalar subquery,
	// which no planner turns into a join: joined, or as EXISTS, Postgres
	// read every row of the table into a hash when it guessed the edges
	// many (a table of edges never analyzed, as one left empty stays, is
	// guessed at thousands of rows): a sweep of a 200,000-row backlog
	// read it all, 250-370 ms each sweep.
	probe := func(value, ref string) string {
		return fmt.Sprintf("(SELECT %s FROM %s p WHERE p.%s = %s)", value, t.Name, id, ref)
	}
	// blocked: edge x of row c keeps it waiting: its parent still queued
	// and not one of $1 (acked now), or failed under a policy other than
	// running the child.
	blocked := func(c string, acked bool) string {
		not := ""
		if acked {
			not = " AND NOT " + d.idsIn("x."+pa, 1)
		}
		return fmt.Sprintf("NOT EXISTS (SELECT 1 FROM %s x WHERE x.%s = %s AND x.%s = %d%s AND %s IS NOT NULL) AND NOT EXISTS (SELECT 1 FROM %s x WHERE x.%s = %s AND x.%s = %d AND x.%s <> %d)",
			e, ch, c, st, EdgePending, not, probe("p."+id, "x."+pa), e, ch, c, st, EdgeFailed, po, PolicyRun)
	}
	// waitingUnlocked (Postgres) locks the children of cond it frees, passing
	// over those locked elsewhere: a claim's, whose row-lock handler may wait
	// for the spare connection the release holds, or another release's (one
	// left waiting is the sweep's, Unheld).
	waitingUnlocked := func(cond string, acked bool) string {
		return fmt.Sprintf("SELECT c.%s FROM %s c WHERE %s AND c.%s = $2 AND %s FOR UPDATE SKIP LOCKED", id, t.Name, cond, lu, blocked("c."+id, acked))
	}
	// $1 acked parents, $2 Waiting.
	if d.Kind == Postgres {
		s.releaseAll = txt(fmt.Sprintf(`WITH a AS (UPDATE %s SET %s = %d WHERE %s AND %s = %d RETURNING %s),
d AS (DELETE FROM %s WHERE %s)
UPDATE %s SET %s = NULL WHERE %s IN (%s) RETURNING %s`,
			e, st, EdgeAcked, d.idsIn(pa, 1), st, EdgePending, ch,
			e, d.idsIn(ch, 1),
			t.Name, lu, id, waitingUnlocked(fmt.Sprintf("c.%s = ANY(ARRAY(SELECT %s FROM a))", id, ch), true), id))
	}
	// $1 acked parents: whether a release has anything to do.
	if d.Kind == Postgres {
		s.toRelease = txt(fmt.Sprintf("SELECT 1 WHERE EXISTS (SELECT 1 FROM %s WHERE %s AND %s = %d) OR EXISTS (SELECT 1 FROM %s WHERE %s)",
			e, d.idsIn(pa, 1), st, EdgePending, e, d.idsIn(ch, 1)))
	}
	// $1 acked parents.
	if d.Kind == MySQL {
		s.markAcked = txt(fmt.Sprintf("SELECT %s FROM %s WHERE %s AND %s = %d", ch, e, d.idsIn(pa, 1), st, EdgePending))
		s.markAckedThen = txt(fmt.Sprintf("UPDATE %s SET %s = %d WHERE %s AND %s = %d", e, st, EdgeAcked, d.idsIn(pa, 1), st, EdgePending))
	} else {
		s.markAcked = txt(fmt.Sprintf("UPDATE %s SET %s = %d WHERE %s AND %s = %d RETURNING %s", e, st, EdgeAcked, d.idsIn(pa, 1), st, EdgePending, ch))
	}
	// $1 acked (or deleted) children.
	s.dropChildren = txt(fmt.Sprintf("DELETE FROM %s WHERE %s", e, d.idsIn(ch, 1)))
	// $1 children, $2 Waiting.
	switch d.Kind {
	case MySQL:
		s.unblock = txt(fmt.Sprintf("SELECT c.%s FROM %s c WHERE %s AND c.%s = $2 AND %s", id, t.Name, d.idsIn("c."+id, 1), lu, blocked("c."+id, false)))
		s.unblockThen = txt(fmt.Sprintf("UPDATE %s SET %s = NULL WHERE %s AND %s = $2", t.Name, lu, d.idsIn(id, 1), lu))
	case Postgres:
		s.unblock = txt(fmt.Sprintf("UPDATE %s SET %s = NULL WHERE %s IN (%s) RETURNING %s", t.Name, lu, id, waitingUnlocked(d.idsIn("c."+id, 1), false), id))
	default:
		s.unblock = txt(fmt.Sprintf("UPDATE %s SET %s = NULL WHERE %s AND %s = $2 AND %s RETURNING %s", t.Name, lu, d.idsIn(id, 1), lu, blocked(t.Name+"."+id, false), id))
	}
	s.writeFailed(d, t, e, txt)
	s.writeReads(d, t, e, txt, probe, blocked)
	return s
}

// writeReads writes the statements that read edges beside the table's
// rows: Count, and the sweep's Stranded and Unheld. probe and blocked are
// Deps'.
func (s *DepsSQL) writeReads(d *Dialect, t Table, e string, txt func(string) text, probe func(value, ref string) string, blocked func(c string, acked bool) string) {
	ch, pa, st := d.Quote(DepsChildColumn), d.Quote(DepsParentColumn), d.Quote(DepsStateColumn)
	id, lu := t.ID, t.LockedUntil
	// Whether the table of edges holds any: while it holds none, no
	// release has anything to do.
	s.anyEdge = txt(fmt.Sprintf("SELECT 1 FROM %s LIMIT 1", e))
	// $1 the child, $2 Never. A pending edge whose parent is gone counts
	// as acked, and one whose parent is parked as failed: the release that
	// marks it may still be queued when the child runs (released by the
	// settlement of another parent, which saw this one settled).
	s.count = txt(fmt.Sprintf(`SELECT CASE WHEN x.%[1]s <> %[2]d THEN x.%[1]s WHEN p.%[3]s IS NULL THEN %[4]d WHEN p.%[5]s >= $2 THEN %[6]d ELSE %[2]d END AS s, COUNT(*)
FROM %[7]s x LEFT JOIN %[8]s p ON x.%[1]s = %[2]d AND p.%[3]s = x.%[9]s WHERE x.%[10]s = $1 GROUP BY 1`,
		st, EdgePending, id, EdgeAcked, lu, EdgeFailed, e, t.Name, pa, ch))
	// $1 Never: the parents of pending edges that are gone or parked (m
	// NULL: gone; 1: parked).
	pErr := "''"
	if t.LastError != "" {
		pErr = "COALESCE(" + probe("p."+t.LastError, "y."+pa) + ", '')"
	}
	s.stranded = txt(fmt.Sprintf("SELECT y.%s, CASE WHEN y.m IS NULL THEN 1 ELSE 0 END, %s FROM (SELECT z.%s, %s AS m FROM (SELECT DISTINCT x.%s FROM %s x WHERE x.%s = %d) z) y WHERE y.m IS NULL OR y.m = 1 LIMIT %d",
		pa, pErr, pa, probe(fmt.Sprintf("CASE WHEN p.%s >= $1 THEN 1 ELSE 0 END", lu), "z."+pa), pa, e, st, EdgePending, StrandedBatch))
	// $1 Waiting: children still waiting whose edges no longer hold them
	// (their marks committed, the release that followed them lost to a
	// kill, or two settlements' checks each seeing the other's edge).
	// Each child once: blocked reads its edges.
	s.unheld = txt(fmt.Sprintf("SELECT y.%s FROM (SELECT DISTINCT z.%s FROM %s z WHERE z.%s <> %d) y WHERE %s = $1 AND %s LIMIT %d",
		ch, ch, e, st, EdgePending, probe("p."+lu, "y."+ch), blocked("y."+ch, false), StrandedBatch))
}

// writeFailed writes the statements run when a parent fails (is parked).
func (s *DepsSQL) writeFailed(d *Dialect, t Table, e string, txt func(string) text) {
	ch, pa, po, st := d.Quote(DepsChildColumn), d.Quote(DepsParentColumn), d.Quote(DepsPolicyColumn), d.Quote(DepsStateColumn)
	id, lu := t.ID, t.LockedUntil
	keep := ""
	if t.LastError != "" {
		keep = fmt.Sprintf(", %s = $4", t.LastError)
	}
	// $1 the failed parent.
	if d.Kind == MySQL {
		s.markFailed = txt(fmt.Sprintf("SELECT %s, %s FROM %s WHERE %s = $1 AND %s = %d", ch, po, e, pa, st, EdgePending))
		s.markFailedThen = txt(fmt.Sprintf("UPDATE %s SET %s = %d WHERE %s = $1 AND %s = %d", e, st, EdgeFailed, pa, st, EdgePending))
		// $1 children, $2 Waiting, $3 Never, $4 the last error.
		s.parkWaiting = txt(fmt.Sprintf("SELECT %s FROM %s WHERE %s AND %s = $2", id, t.Name, d.idsIn(id, 1), lu))
		s.parkWaitingThen = txt(fmt.Sprintf("UPDATE %s SET %s = $3%s WHERE %s AND %s = $2", t.Name, lu, keep, d.idsIn(id, 1), lu))
		s.deleteWaiting = txt(fmt.Sprintf("SELECT %s FROM %s WHERE %s AND %s = $2", id, t.Name, d.idsIn(id, 1), lu))
		s.deleteWaitingThen = txt(fmt.Sprintf("DELETE FROM %s WHERE %s AND %s = $2", t.Name, d.idsIn(id, 1), lu))
		return
	}
	s.markFailed = txt(fmt.Sprintf("UPDATE %s SET %s = %d WHERE %s = $1 AND %s = %d RETURNING %s, %s", e, st, EdgeFailed, pa, st, EdgePending, ch, po))
	s.parkWaiting = txt(fmt.Sprintf("UPDATE %s SET %s = $3%s WHERE %s AND %s = $2 RETURNING %s", t.Name, lu, keep, d.idsIn(id, 1), lu, id))
	s.deleteWaiting = txt(fmt.Sprintf("DELETE FROM %s WHERE %s AND %s = $2 RETURNING %s", t.Name, d.idsIn(id, 1), lu, id))
}

// StrandedBatch is the most parents one sweep for stranded edges reads.
const StrandedBatch = 100

// unquote strips a quoted name's quotes (a Table's Name is quoted).
func unquote(name string) string {
	return strings.NewReplacer(`"`, "", "`", "").Replace(name)
}

// ids binds a list of ids as the statement's parameter 1 (see idsIn).
func (s DepsSQL) ids(t text, ids []int64, args ...any) Call {
	switch s.kind {
	case MySQL:
		c := Call{SQL: strings.Replace(t.sql, idsMark, idList(ids), -1)}
		if len(t.order) > 0 {
			c.Args = reorder(t.order, append([]any{nil}, args...))
		}
		return c
	case SQLite:
		b, _ := json.Marshal(ids) // integers always marshal
		return t.call(append([]any{string(b)}, args...)...)
	}
	return t.call(append([]any{ids}, args...)...)
}

// call is t's Call, "" where the database has no such statement.
func (s DepsSQL) maybe(t text, ids []int64, args ...any) Call {
	if t.sql == "" {
		return Call{}
	}
	return s.ids(t, ids, args...)
}

// ReadParents reads parents, locked so that none is acked before the
// publish's transaction ends (Postgres FOR KEY SHARE, MySQL LOCK IN SHARE
// MODE; SQLite has one writer). Returns id, parked (1 or 0), last error.
func (s DepsSQL) ReadParents(parents []int64) Call {
	return s.ids(s.readParents, parents, s.tm.Encode(Never))
}

// AddEdges writes child's edges under policy.
func (s DepsSQL) AddEdges(child int64, policy int, edges []ParentEdge) Call {
	switch s.kind {
	case Postgres:
		ps, sts := make([]int64, len(edges)), make([]int64, len(edges))
		for i, e := range edges {
			ps[i], sts[i] = e.Parent, int64(e.State)
		}
		return s.addEdges.call(child, policy, ps, sts)
	case SQLite:
		rs := make([][2]int64, len(edges))
		for i, e := range edges {
			rs[i] = [2]int64{e.Parent, int64(e.State)}
		}
		b, _ := json.Marshal(rs)
		return s.addEdges.call(child, policy, string(b))
	}
	var b strings.Builder
	b.WriteString(s.addEdges.sql)
	for i, e := range edges {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "(%d, %d, %d, %d)", child, e.Parent, policy, e.State)
	}
	return Call{SQL: b.String()}
}

// AddAckedEdge writes child's one edge, to a parent whose ack commits in
// this transaction, acked; on Postgres it deletes that parent's own edges
// (as a child) in the same statement, so the release after the ack's
// commit finds nothing to write and waits for no flush of the log.
func (s DepsSQL) AddAckedEdge(child int64, policy int, parent int64) Call {
	if s.addEdgesDrop.sql == "" {
		return s.AddEdges(child, policy, []ParentEdge{{Parent: parent, State: EdgeAcked}})
	}
	return s.addEdgesDrop.call(child, policy, []int64{parent}, []int64{EdgeAcked}, parent)
}

// Ready makes child available, if it still waits.
func (s DepsSQL) Ready(child int64) Call { return s.ready.call(child, s.tm.Encode(Waiting)) }

// ParkNow parks child with lastError (a publish whose parent is parked).
func (s DepsSQL) ParkNow(child int64, lastError string) Call {
	if !s.lastError {
		return s.parkNow.call(child, s.tm.Encode(Never))
	}
	return s.parkNow.call(child, s.tm.Encode(Never), lastError)
}

// DeleteNow deletes child (a publish whose parent is parked).
func (s DepsSQL) DeleteNow(child int64) Call { return s.deleteNow.call(child) }

// ReleaseAll marks the edges of acked parents acked, deletes the edges of
// acked children and makes the children no edge holds any more available,
// in one statement that returns their ids (Postgres); SQL "" elsewhere:
// there MarkAcked, DropChildren and Unblock do it.
func (s DepsSQL) ReleaseAll(acked []int64) Call {
	return s.maybe(s.releaseAll, acked, s.tm.Encode(Waiting))
}

// ToRelease reads whether acked parents have edges to mark or their own
// edges to drop, returning a row if so (Postgres); SQL "" elsewhere. Its
// read writes nothing, so a release that has nothing to do waits for no
// flush of the log and costs the database little.
func (s DepsSQL) ToRelease(acked []int64) Call { return s.maybe(s.toRelease, acked) }

// AnyEdge returns a row when the table of edges holds any.
func (s DepsSQL) AnyEdge() Call { return s.anyEdge.call() }

// MarkAcked marks the pending edges of acked parents acked and returns
// their children (on MySQL it reads them; MarkAckedThen marks).
func (s DepsSQL) MarkAcked(acked []int64) Call { return s.ids(s.markAcked, acked) }

// MarkAckedThen is MarkAcked's write on MySQL; SQL "" elsewhere.
func (s DepsSQL) MarkAckedThen(acked []int64) Call { return s.maybe(s.markAckedThen, acked) }

// DropChildren deletes the edges of children acked or deleted.
func (s DepsSQL) DropChildren(children []int64) Call { return s.ids(s.dropChildren, children) }

// Unblock makes the children that still wait and whose edges no longer
// hold them available, and returns their ids (on MySQL it reads them;
// UnblockThen writes).
func (s DepsSQL) Unblock(children []int64) Call {
	return s.ids(s.unblock, children, s.tm.Encode(Waiting))
}

// UnblockThen is Unblock's write on MySQL, of the ids Unblock read; SQL ""
// elsewhere.
func (s DepsSQL) UnblockThen(ready []int64) Call {
	return s.maybe(s.unblockThen, ready, s.tm.Encode(Waiting))
}

// MarkFailed marks the pending edges of a parked parent failed and returns
// their children with their policies (MySQL: reads them; MarkFailedThen
// marks).
func (s DepsSQL) MarkFailed(parent int64) Call { return s.markFailed.call(parent) }

// MarkFailedThen is MarkFailed's write on MySQL; SQL "" elsewhere.
func (s DepsSQL) MarkFailedThen(parent int64) Call {
	if s.markFailedThen.sql == "" {
		return Call{}
	}
	return s.markFailedThen.call(parent)
}

// ParkWaiting parks the children that still wait, with lastError, and
// returns their ids (MySQL: reads them; ParkWaitingThen parks).
func (s DepsSQL) ParkWaiting(children []int64, lastError string) Call {
	return s.ids(s.parkWaiting, children, s.failArgs(lastError)...)
}

// ParkWaitingThen is ParkWaiting's write on MySQL; SQL "" elsewhere.
func (s DepsSQL) ParkWaitingThen(children []int64, lastError string) Call {
	return s.maybe(s.parkWaitingThen, children, s.failArgs(lastError)...)
}

func (s DepsSQL) failArgs(lastError string) []any {
	args := []any{s.tm.Encode(Waiting), s.tm.Encode(Never)}
	if s.lastError {
		args = append(args, lastError)
	}
	return args
}

// DeleteWaiting deletes the children that still wait and returns their
// ids (MySQL: reads them; DeleteWaitingThen deletes).
func (s DepsSQL) DeleteWaiting(children []int64) Call {
	return s.ids(s.deleteWaiting, children, s.tm.Encode(Waiting))
}

// DeleteWaitingThen is DeleteWaiting's write on MySQL; SQL "" elsewhere.
func (s DepsSQL) DeleteWaitingThen(children []int64) Call {
	return s.maybe(s.deleteWaitingThen, children, s.tm.Encode(Waiting))
}

// Count counts child's edges by state: rows of state, count. A pending
// edge counts by its parent: gone, acked; parked, failed.
func (s DepsSQL) Count(child int64) Call { return s.count.call(child, s.tm.Encode(Never)) }

// Stranded reads up to StrandedBatch parents of pending edges that are
// gone (acked, with their release lost to a crash) or parked: rows of
// parent, gone (1 or 0), its last error.
func (s DepsSQL) Stranded() Call { return s.stranded.call(s.tm.Encode(Never)) }

// Unheld reads up to StrandedBatch rows still waiting, one of whose edges
// is settled, that no edge holds any more: Unblock releases them.
func (s DepsSQL) Unheld() Call { return s.unheld.call(s.tm.Encode(Waiting)) }

// PruneDeps deletes the edges of t whose child is gone: an operator's
// delete of rows leaves no edge of theirs as child behind.
func (d *Dialect) PruneDeps(t AdminTable) Call {
	e := d.Quote(DepsName(unquote(t.Name)))
	return d.text(fmt.Sprintf("DELETE FROM %s WHERE NOT EXISTS (SELECT 1 FROM %s WHERE %s.%s = %s.%s)",
		e, t.Name, t.Name, t.ID, e, d.Quote(DepsChildColumn)), t.Times).call()
}
