package dialect

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The statements of limits per key (inbox.Limit), every dialect, in one
// place.
//
// The table (migrations/*/limit.sql) keeps one row per slot in use, primary
// key (limit_name, key_value, slot) with slot below the limit: the key
// itself caps the rows of one key value in work, as sqlinbox_locks caps a
// lock's holders. A claim passes over the rows of a key value that has as
// many slot rows as its limit (Limit.cond, written into the claim); the
// rows it takes then take a slot each (Take), and the insert that finds
// its slot taken is the arbiter: that row is given back unstarted. A slot
// row is deleted when its row is settled (Free) and by the sweep once its
// expiry has passed (Sweep); until then it counts, so a holder that died
// keeps its slot until its hold's end. Times are Unix microseconds on the
// claimer's clock, so one encoding serves every inbox table's.

// LimitTable is the table of limit slots.
const LimitTable = "sqlinbox_limit_slots"

// Limit is a subscription's limit per key value on its table; the zero
// Limit is none.
type Limit struct {
	// Name names the limit in the slot table: subscriptions that give the
	// same name share its slots. Checked by the caller (see
	// ValidLimitName): it is written into the claim as a literal.
	Name string
	// Key is the key column, quoted.
	Key string
	// Max is how many rows of one key value may be in work at once.
	Max int
}

// On says the limit is set.
func (l Limit) On() bool { return l.Max > 0 }

// ValidLimitName says why name cannot name a limit, or nil: 1 to 200
// characters of letters, digits and _ . : / -, so that it is written into
// SQL as a literal with no escaping.
func ValidLimitName(name string) error {
	if name == "" || len(name) > 200 {
		return fmt.Errorf("a limit's name is 1 to 200 characters, got %d", len(name))
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_.:/-", r)) {
			return fmt.Errorf("a limit's name holds letters, digits and _ . : / - only, got %q", name)
		}
	}
	return nil
}

// keyText is the key column of the table's rows as text, the form the slot
// table keeps it in; NULL stays NULL.
func (d *Dialect) keyText(col string) string {
	if d.Kind == MySQL {
		return "CAST(" + col + " AS CHAR)"
	}
	return "CAST(" + col + " AS TEXT)"
}

// limitCond is the claim's condition (and its AND) that a row's key value
// has a slot left: rows whose key is NULL are not limited. It counts the
// slot rows, live or expired: the sweep deletes expired ones.
func (w inboxTable) limitCond() string {
	l := w.t.Limit
	if !l.On() {
		return ""
	}
	k := w.t.Name + "." + l.Key
	return fmt.Sprintf("(%s IS NULL OR (SELECT COUNT(*) FROM %s ls WHERE ls.limit_name = '%s' AND ls.key_value = %s) < %d) AND ",
		k, LimitTable, l.Name, w.d.keyText(k), l.Max)
}

// limitReturning is what a claim returns after the table's columns where it
// has a limit: the key as text.
func (w inboxTable) limitReturning() string {
	if !w.t.Limit.On() {
		return ""
	}
	return ", " + w.d.keyText(w.t.Name+"."+w.t.Limit.Key)
}

// SlotSQL is every statement of the limit slots.
type SlotSQL struct {
	kind Kind
	// Notify, on Postgres, names the channel Free notifies when it frees
	// the slot of a key value that had all its slots taken ("" for none).
	notify string
}

// Slots returns the statements of the limit slots. channel, on Postgres
// with notifications on, is the channel Free notifies (the inbox table's):
// "" for none.
func (d *Dialect) Slots(channel string) SlotSQL {
	if d.Kind != Postgres {
		channel = ""
	}
	return SlotSQL{kind: d.Kind, notify: channel}
}

// param is placeholder n in the dialect's own words.
func (s SlotSQL) param(n int) string {
	if s.kind == Postgres {
		return "$" + strconv.Itoa(n)
	}
	if s.kind == SQLite {
		return "?" + strconv.Itoa(n)
	}
	return "?"
}

// Occupied reads the slots in use (expired or not) of the key values of
// limit name: one row of key_value, slot each.
func (s SlotSQL) Occupied(name string, keys []string) Call {
	args := make([]any, 0, len(keys)+1)
	args = append(args, name)
	ps := make([]string, len(keys))
	for i, k := range keys {
		ps[i] = s.param(i + 2)
		args = append(args, k)
	}
	return Call{SQL: "SELECT key_value, slot FROM " + LimitTable + " WHERE limit_name = " + s.param(1) +
		" AND key_value IN (" + strings.Join(ps, ", ") + ")", Args: args}
}

// SlotWant is one slot a claim asks for.
type SlotWant struct {
	Key     string
	Slot    int
	RowID   int64
	Expires time.Time
}

// Take inserts the slots wanted, for holder with fence, skipping those
// taken already. Where it returns rows (Returns), one row_id per slot
// taken; elsewhere (MySQL) Taken reads them back.
func (s SlotSQL) Take(name, holder string, fence int64, want []SlotWant) Call {
	args := make([]any, 0, 3+4*len(want))
	args = append(args, name, holder, fence)
	var b strings.Builder
	n := 4
	for i, w := range want {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "(%s, %s, %s, %s, %s, %s, %s)", s.param(1), s.param(n), s.param(n+1), s.param(2), s.param(3), s.param(n+2), s.param(n+3))
		n += 4
		args = append(args, w.Key, w.Slot, w.Expires.UnixMicro(), w.RowID)
	}
	cols := " (limit_name, key_value, slot, holder, fence, expires_at, row_id) VALUES "
	if s.kind == MySQL {
		// MySQL's ? are positional: every placeholder takes its own argument.
		args = args[:0]
		b.Reset()
		for i, w := range want {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("(?, ?, ?, ?, ?, ?, ?)")
			args = append(args, name, w.Key, w.Slot, holder, fence, w.Expires.UnixMicro(), w.RowID)
		}
		return Call{SQL: "INSERT IGNORE INTO " + LimitTable + cols + b.String(), Args: args}
	}
	return Call{SQL: "INSERT INTO " + LimitTable + cols + b.String() + " ON CONFLICT DO NOTHING RETURNING row_id", Args: args}
}

// Returns says Take returns the slots it took.
func (s SlotSQL) Returns() bool { return s.kind != MySQL }

// Taken reads back the row_id of each slot holder took with fence (MySQL,
// after Take).
func (s SlotSQL) Taken(name, holder string, fence int64) Call {
	return Call{SQL: "SELECT row_id FROM " + LimitTable + " WHERE limit_name = ? AND holder = ? AND fence = ?", Args: []any{name, holder, fence}}
}

// SlotHeld names one slot held, for Free and Extend.
type SlotHeld struct {
	Key   string
	Slot  int
	Fence int64
}

// Free deletes the slots of holder given (fenced, so a slot swept and taken
// by another is not freed). On Postgres with a channel it notifies it (an
// empty payload: every subscription of the table) when a freed slot's key
// value had max slot rows.
func (s SlotSQL) Free(name, holder string, max int, held []SlotHeld) Call {
	args := make([]any, 0, 2+3*len(held))
	args = append(args, name, holder)
	if s.kind == MySQL {
		args = args[:0]
		var b strings.Builder
		for i, h := range held {
			if i > 0 {
				b.WriteString(" OR ")
			}
			b.WriteString("(key_value = ? AND slot = ? AND fence = ?)")
			args = append(args, h.Key, h.Slot, h.Fence)
		}
		return Call{SQL: "DELETE FROM " + LimitTable + " WHERE limit_name = ? AND holder = ? AND (" + b.String() + ")", Args: append([]any{name, holder}, args...)}
	}
	var b strings.Builder
	n := 3
	for i, h := range held {
		if i > 0 {
			b.WriteString(" OR ")
		}
		fmt.Fprintf(&b, "(key_value = %s AND slot = %s AND fence = %s)", s.param(n), s.param(n+1), s.param(n+2))
		n += 3
		args = append(args, h.Key, h.Slot, h.Fence)
	}
	del := "DELETE FROM " + LimitTable + " WHERE limit_name = " + s.param(1) + " AND holder = " + s.param(2) + " AND (" + b.String() + ")"
	if s.notify == "" {
		return Call{SQL: del, Args: args}
	}
	// The count reads the table as the statement found it: max rows then
	// means the key value was full, and a claimer may be passing its rows
	// over.
	return Call{SQL: fmt.Sprintf(`WITH freed AS (%s RETURNING key_value)
SELECT pg_notify(%s, '') FROM (SELECT DISTINCT key_value FROM freed) f
WHERE (SELECT COUNT(*) FROM %s ls WHERE ls.limit_name = $1 AND ls.key_value = f.key_value) >= %d`,
		del, quoteLiteral(s.notify), LimitTable, max), Args: args}
}

// Notifies says Free returns rows (it notifies), to be read or discarded.
func (s SlotSQL) Notifies() bool { return s.notify != "" }

// Extend makes a slot held last until expires.
func (s SlotSQL) Extend(name, holder string, h SlotHeld, expires time.Time) Call {
	return Call{SQL: fmt.Sprintf("UPDATE %s SET expires_at = %s WHERE limit_name = %s AND holder = %s AND key_value = %s AND slot = %s AND fence = %s",
		LimitTable, s.param(1), s.param(2), s.param(3), s.param(4), s.param(5), s.param(6)),
		Args: []any{expires.UnixMicro(), name, holder, h.Key, h.Slot, h.Fence}}
}

// Heartbeat makes every slot of holder last until expires.
func (s SlotSQL) Heartbeat(name, holder string, expires time.Time) Call {
	return Call{SQL: fmt.Sprintf("UPDATE %s SET expires_at = %s WHERE limit_name = %s AND holder = %s",
		LimitTable, s.param(1), s.param(2), s.param(3)), Args: []any{expires.UnixMicro(), name, holder}}
}

// Sweep deletes the slots of limit name whose expiry is at or before now.
func (s SlotSQL) Sweep(name string, now time.Time) Call {
	return Call{SQL: fmt.Sprintf("DELETE FROM %s WHERE limit_name = %s AND expires_at <= %s", LimitTable, s.param(1), s.param(2)),
		Args: []any{name, now.UnixMicro()}}
}

// InUse counts the slots in use of limit name, live at now: one row of
// key_value and count per key value, the fullest first, at most max rows.
func (s SlotSQL) InUse(name string, now time.Time, max int) Call {
	return Call{SQL: fmt.Sprintf("SELECT key_value, COUNT(*) FROM %s WHERE limit_name = %s AND expires_at > %s GROUP BY key_value ORDER BY COUNT(*) DESC, key_value LIMIT %d",
		LimitTable, s.param(1), s.param(2), max), Args: []any{name, now.UnixMicro()}}
}

// Probe reads at most one row of the slot table: the check that it exists.
func (s SlotSQL) Probe() Call {
	return Call{SQL: "SELECT COUNT(*) FROM (SELECT 1 FROM " + LimitTable + " LIMIT 1) AS t"}
}

// quoteLiteral writes s as a SQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
