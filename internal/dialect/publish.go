package dialect

import (
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// publishTime is the SQL of a published row's locked_until: parameter n is
// the offset for Times.At (NULL for no delay); with the database clock,
// parameter n+1 is an absolute time encoded as the column keeps it, which
// wins when not NULL (a publish for a set time must not depend on how far
// the host's clock is from the database's).
func (d *Dialect) publishTime(tm Times, n int) string {
	at := tm.At(n)
	if !tm.InDatabase {
		return at
	}
	if d.Kind == Postgres {
		// now() + NULL is NULL on Postgres: no delay stays NULL.
		return fmt.Sprintf("COALESCE($%d::timestamptz, %s)", n+1, at)
	}
	// SQLite's time functions would turn a NULL offset into now.
	return fmt.Sprintf("CASE WHEN $%d IS NOT NULL THEN $%d WHEN $%d IS NULL THEN NULL ELSE %s END", n+1, n+1, n, at)
}

// onConflict is the ON CONFLICT clause of a table with keys (key the quoted
// key column), "" without keys: a row whose key is queued is skipped.
// MySQL has none: see insertInto.
func (d *Dialect) onConflict(key string) string {
	if key == "" || d.Kind == MySQL {
		return ""
	}
	return fmt.Sprintf(" ON CONFLICT (%s) DO NOTHING", key)
}

// insertInto begins an insert into a table with keys (key the quoted key
// column, "" for none). MySQL skips a row whose key is queued with INSERT
// IGNORE, which also turns other errors of the row into warnings: the
// publish's values come from the library, typed to the table's checked
// columns. Its RETURNING is MariaDB's (10.5+), not MySQL 8's.
func (d *Dialect) insertInto(key string) string {
	if key != "" && d.Kind == MySQL {
		return "INSERT IGNORE INTO"
	}
	return "INSERT INTO"
}

// withNotify wraps an insert so that it also runs pg_notify(channel,
// payload), parameters n and n+1, in the same statement, returning the
// insert's returning columns.
func withNotify(insert string, returning []string, n int) string {
	ret := make([]string, len(returning))
	for i, r := range returning {
		ret[i] = "ins." + r
	}
	return fmt.Sprintf("WITH ins AS (%s) SELECT %s FROM ins, (SELECT pg_notify($%d, $%d)) AS n",
		insert, strings.Join(ret, ", "), n, n+1)
}

// NotifySQL wakes the listeners of a channel; its SQL is "" where the
// database has no notifications.
type NotifySQL struct{ text }

// Notify writes the statement of NotifySQL.
func (d *Dialect) Notify() NotifySQL {
	if d.Kind != Postgres {
		return NotifySQL{}
	}
	return NotifySQL{d.text("SELECT pg_notify($1, $2)", Times{})}
}

// Call notifies payload on channel.
func (s NotifySQL) Call(channel, payload string) Call { return s.call(channel, payload) }

// Insert is a publish of one row.
type Insert struct {
	Table       string   // quoted
	Columns     []string // quoted: the columns the row writes
	LockedUntil string   // quoted
	ID          string   // quoted: the column returned
	Key         string   // quoted key column, "" for a table without keys
	Notify      bool     // Postgres: pg_notify(channel, payload) in the statement
	// HandOff (Postgres, a table without keys) is the quoted table of
	// edges of a row published After(a parent acked in the same
	// transaction): the row's acked edge is written, and the parent's own
	// edges dropped, in the insert's statement (see DepsSQL.AddAckedEdge).
	HandOff string
	// Held, with HandOff, is what a claim of the handler's subscription
	// returns (its columns, unqualified): the row is written leased, until
	// the time Call's offset gives, its attempt counted in Attempts (quoted,
	// "" for none), and the statement returns it as that claim would, for
	// the subscription to adopt (claim.Adopter). It notifies no one.
	Held     string
	Attempts string
}

// PublishSQL writes one row and returns its id; with a key already queued
// it returns no row. Where INSERT returns no rows (MySQL 8: see
// Dialect.Returns) it is run as an Exec: the id is the result's
// LastInsertId (a generated id) and a key already queued affects no row.
type PublishSQL struct {
	text
	notify  bool
	returns bool
	handOff bool
}

// Returns says the statement returns the row's id (see PublishSQL).
func (s PublishSQL) Returns() bool { return s.returns }

// Publish writes the statement of one row's publish.
func (d *Dialect) Publish(in Insert, tm Times) PublishSQL {
	params := make([]string, 0, len(in.Columns)+1)
	for i := range in.Columns {
		params = append(params, fmt.Sprintf("$%d", i+1))
	}
	n := len(in.Columns) + 1
	params = append(params, d.publishTime(tm, n))
	cols := append(slices.Clip(in.Columns), in.LockedUntil)
	handOff := in.HandOff != "" && d.Kind == Postgres
	held := handOff && in.Held != ""
	ret, sel := in.ID, "ins."+in.ID
	if held {
		if in.Attempts != "" {
			cols, params = append(cols, in.Attempts), append(params, "1")
		}
		ret, sel, in.Notify = "*", in.Held, false
	}
	q := fmt.Sprintf("%s %s (%s) VALUES (%s)%s",
		d.insertInto(in.Key), in.Table, strings.Join(cols, ", "), strings.Join(params, ", "), d.onConflict(in.Key))
	if d.Returns() {
		q += " RETURNING " + ret
	}
	if tm.InDatabase {
		n++
	}
	switch {
	case handOff:
		q = d.withHandOff(q, in.ID, sel, in.HandOff, in.Notify, n+1)
	case in.Notify:
		q = withNotify(q, []string{in.ID}, n+1)
	}
	return PublishSQL{text: d.text(q, tm), notify: in.Notify, returns: d.Returns(), handOff: handOff}
}

// withHandOff wraps a publish (as the CTE ins, whose id column is id) so
// that it also writes the row's edge to the parent of the last parameter
// but one, acked, under the policy of the last, and drops that parent's
// own edges (see Insert.HandOff); it returns sel, read from ins. With
// notify, it notifies as withNotify does, parameters n and n+1, the
// parent's n+2 and n+3.
func (d *Dialect) withHandOff(publish, id, sel, edges string, notify bool, n int) string {
	ch, pa, po, st := d.Quote(DepsChildColumn), d.Quote(DepsParentColumn), d.Quote(DepsPolicyColumn), d.Quote(DepsStateColumn)
	from := "ins"
	if notify {
		from = fmt.Sprintf("ins, (SELECT pg_notify($%d, $%d)) AS n", n, n+1)
		n += 2
	}
	return fmt.Sprintf(`WITH ins AS (%s),
own AS (DELETE FROM %s WHERE %s = $%d),
edge AS (INSERT INTO %s (%s, %s, %s, %s) SELECT ins.%s, $%d, $%d, %d FROM ins)
SELECT %s FROM %s`, publish, edges, ch, n, edges, ch, pa, po, st, id, n, n+1, EdgeAcked, sel, from)
}

// Call writes values (one per Insert.Columns, in order) and locked_until:
// offset for Times.At (nil for no delay) and, with the database clock, at,
// an absolute time encoded as the column keeps it (nil for none; it wins);
// with Notify, a notification of payload on channel. values is reused.
func (s PublishSQL) Call(values []any, offset, at any, channel, payload string) Call {
	args := append(values, offset)
	if s.tm.InDatabase {
		args = append(args, at)
	}
	if s.notify {
		args = append(args, channel, payload)
	}
	return s.call(args...)
}

// HandsOff says the statement writes the row's edge (Insert.HandOff).
func (s PublishSQL) HandsOff() bool { return s.handOff }

// HandOff adds to a Call of a statement with Insert.HandOff its parent,
// acked in the same transaction, and the row's policy.
func (s PublishSQL) HandOff(c Call, parent int64, policy int) Call {
	c.Args = append(c.Args, parent, policy)
	return c
}

// Batch is a publish of many rows into one table, all with the same
// locked_until (the batch's Delay or At) and the same group.
type Batch struct {
	Table       string   // quoted
	Columns     []string // quoted: the columns each row writes
	Types       []string // Postgres: each column's declared type (format_type), for its array
	Group       string   // quoted group column written from one parameter, "" for none
	GroupType   string   // Postgres: the group column's type
	LockedUntil string   // quoted
	Returning   []string // quoted: id, then the key column where there is one
	// Key is the quoted key column: a row whose key is already in the table
	// is skipped (ON CONFLICT DO NOTHING), "" for a table without keys.
	Key    string
	Notify bool // Postgres: pg_notify(channel, payload) in the statement
}

// fixed numbers a batch statement's parameters, in order: the offset for
// Times.At, with the database clock the absolute time (see publishTime),
// with Notify the channel and payload, with Group the group, then from
// first the rows' columns: on Postgres one array each, on SQLite each row's
// values in turn.
func (b Batch) fixed(tm Times) (timeN, notifyN, groupN, first int) {
	n := 2
	if tm.InDatabase {
		n++
	}
	notifyN = n
	if b.Notify {
		n += 2
	}
	groupN = n
	if b.Group != "" {
		n++
	}
	return 1, notifyN, groupN, n
}

// PublishMany is the statement that writes a batch. On Postgres it writes
// every row from one array per column, one statement however many rows
// (unnest ... WITH ORDINALITY, inserted in the rows' order, so generated ids
// rise with it); on SQLite and MySQL it writes rows rows from a VALUES
// list, the parameters of a row numbered after those of the row before
// (on MySQL put in text order by Dialect.Bind). A multi-row INSERT's
// auto-increment ids rise in the rows' order on InnoDB. Where INSERT
// returns no rows (MySQL 8: Dialect.Returns) the statement returns none:
// see Dialect.ConsecutiveIDs.
func (d *Dialect) PublishMany(b Batch, tm Times, rows int) string {
	timeN, notifyN, groupN, first := b.fixed(tm)
	cols := strings.Join(b.Columns, ", ")
	if b.Group != "" {
		cols += ", " + b.Group
	}
	cols += ", " + b.LockedUntil
	at := d.publishTime(tm, timeN)
	conflict := d.onConflict(b.Key)
	returning := strings.Join(b.Returning, ", ")
	if d.Kind == Postgres {
		return d.publishManyPostgres(b, at, conflict, returning, cols, notifyN, groupN, first)
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s %s (%s) VALUES ", d.insertInto(b.Key), b.Table, cols)
	// SQLite numbers its parameters (?n); on MySQL the text keeps $n, and
	// the caller puts the arguments in text order (Dialect.Bind).
	mark := "$"
	if d.Kind == SQLite {
		at, mark = d.Rebind(at), "?"
	}
	n := first
	for r := range rows {
		if r > 0 {
			sb.WriteString(", ")
		}
		sb.WriteByte('(')
		for range b.Columns {
			fmt.Fprintf(&sb, "%s%d, ", mark, n)
			n++
		}
		if b.Group != "" {
			fmt.Fprintf(&sb, "%s%d, ", mark, groupN)
		}
		sb.WriteString(at)
		sb.WriteByte(')')
	}
	sb.WriteString(conflict)
	if d.Returns() {
		fmt.Fprintf(&sb, " RETURNING %s", returning)
	}
	return sb.String()
}

func (d *Dialect) publishManyPostgres(b Batch, at, conflict, returning, cols string, notifyN, groupN, first int) string {
	group := ""
	if b.Group != "" {
		group = fmt.Sprintf("$%d::%s, ", groupN, b.GroupType)
	}
	arrays := make([]string, len(b.Columns))
	sel := make([]string, len(b.Columns))
	names := make([]string, len(b.Columns))
	for i := range b.Columns {
		arrays[i] = fmt.Sprintf("$%d::%s[]", first+i, b.Types[i])
		names[i] = fmt.Sprintf("c%d", i)
		sel[i] = "u." + names[i]
	}
	q := fmt.Sprintf("INSERT INTO %s (%s) SELECT %s, %s%s FROM unnest(%s) WITH ORDINALITY AS u(%s, ord) ORDER BY u.ord%s RETURNING %s",
		b.Table, cols, strings.Join(sel, ", "), group, at, strings.Join(arrays, ", "), strings.Join(names, ", "), conflict, returning)
	if !b.Notify {
		return q
	}
	return withNotify(q, b.Returning, notifyN)
}

// MaxParams is the most parameters one SQLite statement takes
// (SQLITE_MAX_VARIABLE_NUMBER of modernc.org/sqlite).
const MaxParams = 32766

// Listen is the statement that subscribes a Postgres session to channel,
// quoted as an identifier whatever it holds.
func Listen(channel string) string { return "LISTEN " + pgx.Identifier{channel}.Sanitize() }

// BatchArrays says a batch is one statement binding one array per column,
// atomic on its own however many rows (Postgres); elsewhere it is
// multi-row inserts, in chunks, in one transaction.
func (d *Dialect) BatchArrays() bool { return d.Kind == Postgres }
