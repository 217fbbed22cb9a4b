package dialect

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The history of an inbox table: a table of the same columns, plus when
// each row was handled, by which instance and how long its handling took,
// into which an ack moves the row instead of deleting it (see
// inbox.History). Each statement's text is beside its Call.

// The columns a history table adds to its inbox table's.
const (
	HandledAtColumn = "handled_at"  // when the ack moved the row, as the inbox keeps its times
	HandledByColumn = "handled_by"  // the instance that acked it
	DurationColumn  = "duration_us" // from its last claim to its ack, in microseconds
)

// HistoryName is the history table of table: its name with "_history"
// after it, in the same schema.
func HistoryName(table string) string { return table + "_history" }

// HistoryTable is the history table of an inbox table as the table check
// found it.
type HistoryTable struct {
	Name string // quoted
	// Columns are the inbox's columns the history keeps, quoted: every
	// column of the inbox table (the table check asks for any missing).
	Columns []string
}

// HistorySQL is what the forms and the broker run on a table with a
// history.
type HistorySQL struct {
	// Move moves claimed rows fenced on their leases into the history (the
	// lease form's ack); MoveLocked moves rows held by a lock (row-lock
	// and advisory forms).
	Move, MoveLocked MoveSQL
	// Prune deletes up to PruneBatch history rows handled before a time.
	Prune PruneSQL
	// ByKey reads history rows by key (see Dialect.ByKey); empty where the
	// table has no key column.
	ByKey ByKeySQL
}

// PruneBatch is the most history rows one prune statement deletes: small,
// so it holds its locks for a moment and the WAL it writes stays short.
const PruneBatch = 500

// History writes the statements of table t's history h; key is the inbox's
// quoted key column, "" for none.
func (d *Dialect) History(t Table, tm Times, h HistoryTable, key string) *HistorySQL {
	w := historyTable{d: d, t: t, tm: tm, h: h}
	s := &HistorySQL{Move: w.move(true), MoveLocked: w.move(false), Prune: w.prune()}
	if key != "" {
		s.ByKey = d.ByKey(h.Name, t.ID, key)
	}
	return s
}

type historyTable struct {
	d  *Dialect
	t  Table
	tm Times
	h  HistoryTable
}

// into is the history's INSERT up to its SELECT.
func (w historyTable) into() string {
	d := w.d
	return fmt.Sprintf("INSERT INTO %s (%s, %s, %s, %s)", w.h.Name, strings.Join(w.h.Columns, ", "),
		d.Quote(HandledAtColumn), d.Quote(HandledByColumn), d.Quote(DurationColumn))
}

// of is the history's columns read from alias a.
func (w historyTable) of(a string) string {
	out := make([]string, len(w.h.Columns))
	for i, c := range w.h.Columns {
		out[i] = a + "." + c
	}
	return strings.Join(out, ", ")
}

// MoveSQL moves acked rows into the history. On Postgres it is one
// statement that returns the ids it moved; elsewhere two, a copy and a
// delete, that the caller runs in one transaction and commits only when
// both counted every row (see Returns).
type MoveSQL struct {
	one        text // Postgres
	copy, del  string
	kind       Kind
	tm         Times
	fenced     bool
	lu, id, tn string // MySQL: quoted lease and id columns, and the table
}

// move writes MoveSQL: fenced on each row's lease, or not.
func (w historyTable) move(fenced bool) MoveSQL {
	t := w.t
	s := MoveSQL{kind: w.d.Kind, tm: w.tm, fenced: fenced, lu: t.LockedUntil, id: t.ID, tn: t.Name}
	switch w.d.Kind {
	case Postgres:
		// $1 the ids, $2 the durations, $3 now, $4 the instance, $5 the
		// leases in microseconds since the epoch (fenced).
		a, on := "unnest($1::bigint[], $2::bigint[]) AS a(id, took)", fmt.Sprintf("t.%s = a.id", t.ID)
		if fenced {
			a = "unnest($1::bigint[], $2::bigint[], $5::bigint[]) AS a(id, took, lease)"
			on += fmt.Sprintf(" AND t.%s = timestamptz 'epoch' + a.lease * interval '1 microsecond'", t.LockedUntil)
		}
		s.one = w.d.text(fmt.Sprintf("WITH d AS (DELETE FROM %s AS t USING %s WHERE %s RETURNING %s, a.took AS sqlinbox_took) %s SELECT %s, $3, $4, d.sqlinbox_took FROM d RETURNING %s",
			t.Name, a, on, w.of("t"), w.into(), w.of("d"), t.ID), w.tm)
	case SQLite:
		// ?1 a JSON array of [id, lease, duration], ?2 now, ?3 the instance.
		// jsonb_each hands each [id, lease, duration] over parsed, where
		// json_each hands its text to each ->> to parse again (the copy
		// took a tenth less CPU; SQLite 3.45, and modernc's is newer).
		on := fmt.Sprintf("t.%s = a.value ->> 0", t.ID)
		if fenced {
			on += fmt.Sprintf(" AND t.%s = a.value ->> 1", t.LockedUntil)
		}
		s.copy = fmt.Sprintf("%s SELECT %s, ?2, ?3, a.value ->> 2 FROM jsonb_each(?1) AS a JOIN %s AS t ON %s",
			w.into(), w.of("t"), t.Name, on)
		// ?1 a JSON array of the ids. The copy, fenced, counted every row
		// in this transaction, which holds SQLite's one write lock: no
		// lease changed since, and the ids alone name the same rows, with
		// no second fenced join (a tenth of a move's CPU).
		s.del = fmt.Sprintf("DELETE FROM %s WHERE %s IN (SELECT value FROM json_each(?1))", t.Name, t.ID)
	default:
		// Written out at the call (see mysqlCalls).
		s.copy = strings.ReplaceAll(w.into(), "%", "%%") + " SELECT " + w.of("t") + ", ?, ?, %s FROM " + t.Name + " AS t WHERE "
		s.del = "DELETE FROM " + t.Name + " WHERE "
	}
	return s
}

// Returns says the move is one statement that returns the ids it moved
// (Postgres). Elsewhere it is two statements, a copy then a delete, whose
// counts each must be every row's: in a transaction that commits only then.
func (s MoveSQL) Returns() bool { return s.kind == Postgres }

// Call moves rows, stamped with now and instance: one Call where Returns
// says so, else the copy and the delete.
func (s MoveSQL) Call(rows []Fenced, now time.Time, instance string) []Call {
	at := s.tm.Encode(now)
	switch s.kind {
	case Postgres:
		ids, took, leases := make([]byte, 0, 2+len(rows)*20), make([]byte, 0, 2+len(rows)*8), make([]byte, 0, 2+len(rows)*20)
		ids, took, leases = append(ids, '{'), append(took, '{'), append(leases, '{')
		for i, r := range rows {
			if i > 0 {
				ids, took, leases = append(ids, ','), append(took, ','), append(leases, ',')
			}
			ids = strconv.AppendInt(ids, r.ID, 10)
			took = strconv.AppendInt(took, r.Took.Microseconds(), 10)
			leases = strconv.AppendInt(leases, r.Lease.UnixMicro(), 10)
		}
		ids, took, leases = append(ids, '}'), append(took, '}'), append(leases, '}')
		if s.fenced {
			return []Call{s.one.call(string(ids), string(took), at, instance, string(leases))}
		}
		return []Call{s.one.call(string(ids), string(took), at, instance)}
	case SQLite:
		rs := make([][3]any, len(rows))
		for i, r := range rows {
			rs[i] = [3]any{r.ID, s.tm.Encode(r.Lease), r.Took.Microseconds()}
		}
		b, _ := json.Marshal(rs) // ids, times and integers always marshal
		ids := make([]byte, 0, 2+len(rows)*8)
		ids = append(ids, '[')
		for i, r := range rows {
			if i > 0 {
				ids = append(ids, ',')
			}
			ids = strconv.AppendInt(ids, r.ID, 10)
		}
		ids = append(ids, ']')
		return []Call{{SQL: s.copy, Args: []any{string(b), at, instance}}, {SQL: s.del, Args: []any{string(ids)}}}
	}
	return s.mysqlCalls(rows, at, instance)
}

// mysqlCalls writes the MySQL move: both statements name the rows, with
// their leases where fenced, in an IN list the primary key serves; the
// copy gives each its duration by a CASE and locks the rows it reads (FOR
// UPDATE: a shared lock, taken at REPEATABLE READ, would have to become
// the delete's exclusive one, and two such upgrades deadlock).
func (s MoveSQL) mysqlCalls(rows []Fenced, at any, instance string) []Call {
	var took, in strings.Builder
	copyArgs := make([]any, 0, 2+4*len(rows))
	copyArgs = append(copyArgs, at, instance)
	var inArgs []any
	fmt.Fprintf(&took, "CASE t.%s", s.id)
	for i, r := range rows {
		if i > 0 {
			in.WriteByte(',')
		}
		took.WriteString(" WHEN ? THEN ?")
		copyArgs = append(copyArgs, r.ID, r.Took.Microseconds())
		if s.fenced {
			in.WriteString("(?,?)")
			inArgs = append(inArgs, r.ID, s.tm.Encode(r.Lease))
		} else {
			in.WriteByte('?')
			inArgs = append(inArgs, r.ID)
		}
	}
	took.WriteString(" END")
	cond := func(t string) string {
		switch {
		case len(rows) == 1 && s.fenced:
			// Equalities on the primary key lock the row alone; an IN list
			// may be read as a range, whose gap locks (at REPEATABLE READ,
			// a handler's transaction) deadlock against its neighbours'.
			return t + s.id + " = ? AND " + t + s.lu + " = ?"
		case len(rows) == 1:
			return t + s.id + " = ?"
		case s.fenced:
			return "(" + t + s.id + ", " + t + s.lu + ") IN (" + in.String() + ")"
		}
		return t + s.id + " IN (" + in.String() + ")"
	}
	copyArgs = append(copyArgs, inArgs...)
	return []Call{{SQL: fmt.Sprintf(s.copy, took.String()) + cond("t.") + " FOR UPDATE", Args: copyArgs}, {SQL: s.del + cond(""), Args: inArgs}}
}

// PruneSQL deletes up to PruneBatch history rows handled before a time.
type PruneSQL struct{ text }

// $1 the time.
func (w historyTable) prune() PruneSQL {
	h, at := w.h.Name, w.d.Quote(HandledAtColumn)
	switch w.d.Kind {
	case Postgres:
		// SKIP LOCKED: instances that prune at once take other rows
		// instead of waiting for each other.
		return PruneSQL{w.d.text(fmt.Sprintf("DELETE FROM %s WHERE ctid = ANY(ARRAY(SELECT ctid FROM %s WHERE %s < $1 ORDER BY %s LIMIT %d FOR UPDATE SKIP LOCKED))", h, h, at, at, PruneBatch), w.tm)}
	case SQLite:
		return PruneSQL{w.d.text(fmt.Sprintf("DELETE FROM %s WHERE rowid IN (SELECT rowid FROM %s WHERE %s < $1 ORDER BY %s LIMIT %d)", h, h, at, at, PruneBatch), w.tm)}
	}
	return PruneSQL{w.d.text(fmt.Sprintf("DELETE FROM %s WHERE %s < $1 ORDER BY %s LIMIT %d", h, at, at, PruneBatch), w.tm)}
}

// Call deletes a batch of rows handled before before.
func (s PruneSQL) Call(before time.Time) Call { return s.call(s.tm.Encode(before)) }

// HistoryDDL is the DDL of table's history: table's columns (cols, as
// Columns read them) with their types, the three columns a history adds
// (handled_at of the lease column lu's type), and indexes on handled_at
// (the prune's and a listing's walk), on id and on the key column (key,
// "" for none). No unique index: a row written by plain SQL with a key a
// history row keeps must still be movable there when it is acked.
func (d *Dialect) HistoryDDL(table string, cols []Column, id, lu, key string) []string {
	h := HistoryName(table)
	defs := make([]string, 0, len(cols)+3)
	atType := map[Kind]string{Postgres: "timestamptz", SQLite: "DATETIME", MySQL: "datetime(6)"}[d.Kind]
	for _, c := range cols {
		def := d.Quote(c.Name) + " " + c.Type
		if c.NotNull {
			def += " NOT NULL"
		}
		defs = append(defs, def)
		if c.Name == lu {
			atType = c.Type
		}
	}
	text, bigint := "text", "bigint"
	if d.Kind == MySQL {
		text = "varchar(255)"
	}
	defs = append(defs, d.Quote(HandledAtColumn)+" "+atType+" NOT NULL", d.Quote(HandledByColumn)+" "+text+" NOT NULL", d.Quote(DurationColumn)+" "+bigint+" NOT NULL")
	indexed := []string{HandledAtColumn, id}
	if key != "" {
		indexed = append(indexed, key)
	}
	bare := bareName(h)
	if d.Kind == MySQL {
		// MySQL has no CREATE INDEX IF NOT EXISTS: the indexes are in the
		// CREATE TABLE.
		for _, c := range indexed {
			defs = append(defs, fmt.Sprintf("KEY %s (%s)", d.Quote(bare+"_"+c), d.Quote(c)))
		}
		return []string{fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s (\n    %s\n) ENGINE=InnoDB", d.Quote(h), strings.Join(defs, ",\n    "))}
	}
	out := []string{fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s (\n    %s\n)", d.Quote(h), strings.Join(defs, ",\n    "))}
	for _, c := range indexed {
		out = append(out, fmt.Sprintf("CREATE INDEX IF NOT EXISTS %s ON %s (%s)", d.Quote(bare+"_"+c), d.Quote(h), d.Quote(c)))
	}
	return out
}

// HistoryFilter selects rows of a history: an AdminFilter's group, ids and
// error text (its states unused), and a key and a range of handled_at.
type HistoryFilter struct {
	AdminFilter
	KeyColumn string // quoted; "" when the table has no key column
	Key       string // "" for any
	From, To  time.Time
}

// ListHistory lists the rows f selects of t's history (quoted), the most
// recently handled first: t's columns as ListRows reads them, then
// handled_at, handled_by and duration_us.
func (d *Dialect) ListHistory(t AdminTable, history string, f HistoryFilter, limit int) (Call, error) {
	t.Name = history
	af := f.AdminFilter
	af.States = nil
	where, args, err := d.where(t, af)
	if err != nil {
		return Call{}, err
	}
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	at := d.Quote(HandledAtColumn)
	if f.Key != "" {
		if f.KeyColumn == "" {
			return Call{}, fmt.Errorf("table %s has no key column to filter on", history)
		}
		where += " AND " + f.KeyColumn + " = " + arg(f.Key)
	}
	if !f.From.IsZero() {
		where += " AND " + at + " >= " + arg(t.Times.Encode(f.From))
	}
	if !f.To.IsZero() {
		where += " AND " + at + " < " + arg(t.Times.Encode(f.To))
	}
	cols := strings.Join([]string{t.ID, t.LockedUntil, or(t.Attempts, "0"), or(t.LastError, "NULL"), or(t.CreatedAt, "NULL"), t.Payload,
		at, d.Quote(HandledByColumn), d.Quote(DurationColumn)}, ", ")
	return d.call(fmt.Sprintf("SELECT %s FROM %s WHERE %s ORDER BY %s DESC, %s DESC LIMIT %d", cols, history, where, at, t.ID, limit), args), nil
}
