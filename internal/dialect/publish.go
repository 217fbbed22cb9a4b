package dialect

import (
	"fmt"
	"strings"
)

// PublishTime is the SQL of a published row's locked_until: parameter n is
// the offset for Times.At (NULL for no delay); with the database clock,
// parameter n+1 is an absolute time encoded as the column keeps it, which
// wins when not NULL (a publish for a set time must not depend on how far
// the host's clock is from the database's).
func PublishTime(d *Dialect, tm Times, n int) string {
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
// Times.At, with the database clock the absolute time (see PublishTime),
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
// rise with it); on SQLite it writes rows rows from a VALUES list, the
// parameters of a row numbered after those of the row before.
func (d *Dialect) PublishMany(b Batch, tm Times, rows int) string {
	timeN, notifyN, groupN, first := b.fixed(tm)
	cols := strings.Join(b.Columns, ", ")
	if b.Group != "" {
		cols += ", " + b.Group
	}
	cols += ", " + b.LockedUntil
	at := PublishTime(d, tm, timeN)
	conflict := ""
	if b.Key != "" {
		conflict = fmt.Sprintf(" ON CONFLICT (%s) DO NOTHING", b.Key)
	}
	returning := strings.Join(b.Returning, ", ")
	if d.Kind == Postgres {
		return d.publishManyPostgres(b, at, conflict, returning, cols, notifyN, groupN, first)
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "INSERT INTO %s (%s) VALUES ", b.Table, cols)
	at = d.Rebind(at)
	n := first
	for r := range rows {
		if r > 0 {
			sb.WriteString(", ")
		}
		sb.WriteByte('(')
		for range b.Columns {
			fmt.Fprintf(&sb, "?%d, ", n)
			n++
		}
		if b.Group != "" {
			fmt.Fprintf(&sb, "?%d, ", groupN)
		}
		sb.WriteString(at)
		sb.WriteByte(')')
	}
	fmt.Fprintf(&sb, "%s RETURNING %s", conflict, returning)
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
	ret := make([]string, len(b.Returning))
	for i, r := range b.Returning {
		ret[i] = "ins." + r
	}
	return fmt.Sprintf("WITH ins AS (%s) SELECT %s FROM ins, (SELECT pg_notify($%d, $%d)) AS n",
		q, strings.Join(ret, ", "), notifyN, notifyN+1)
}

// MaxParams is the most parameters one SQLite statement takes
// (SQLITE_MAX_VARIABLE_NUMBER of modernc.org/sqlite).
const MaxParams = 32766
