package dialect

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The statements of limits per key (inbox.Limit), every dialect, in one
// place.
//
// The table (migrations/*/limit.sql) keeps one row per slot of a key value,
// primary key (limit_name, key_value, slot) with slot below the limit: the
// key itself caps the rows of one key value in work, as sqlinbox_locks caps
// a lock's holders. A slot is held while its holder is not ''. A claim
// passes over the rows of a key value whose held slots number its limit
// (Limit.cond, written into the claim); the rows it takes then take a slot
// each (Take: an insert, or an update of a free slot's row), and the one
// that finds its slot held by another claimer loses it: that row is given
// back unstarted. A slot is freed when its row is settled (Free) and by the
// sweep once its expiry has passed (Sweep); until then it counts, so a
// holder that died keeps its slot until its hold's end.
//
// A slot's row stays when the slot frees, its holder emptied: the take and
// the free that follow update columns no index holds, so on Postgres they
// are HOT updates, where an insert and a delete a handling left an index
// entry behind each, which every claim's count walked until a vacuum (a
// drain over 1000 keys ran at a quarter of its rate without a limit). The
// sweep deletes the rows of slots free for a while (FreeRowsAfter). Times
// are Unix microseconds on the claimer's clock, so one encoding serves
// every inbox table's.

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
	// Max is how many rows of one key value may be in work at once; of a
	// rate (Per set), how many handlings of one key value may start per
	// Per.
	Max int
	// Per, when set, makes the limit a rate (inbox.Rate): a slot is taken
	// at a handling's start, lasts Per from then, and is not freed when the
	// row is settled; the sweep frees it once expired.
	Per time.Duration
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

// limitCond is the claim's condition (and its AND) that a row's key values
// have a slot left, of the limit and of the rate where the table has them:
// rows whose key is NULL are not limited by it.
func (w inboxTable) limitCond() string {
	return w.slotCond(w.t.Limit) + w.slotCond(w.t.Rate)
}

// slotCond is limitCond for one limit. It counts the slots held, live or
// expired: the sweep frees expired ones.
func (w inboxTable) slotCond(l Limit) string {
	if !l.On() {
		return ""
	}
	k := w.t.Name + "." + l.Key
	if l.Per > 0 {
		// A rate's n is large (100 a minute), and a backlog's rows are
		// mostly of values at their rate: a count per row read up to n
		// slots for each row the claim passed over (a claim of a 25,000-row
		// backlog at 100 a second took seconds). The values at their rate
		// are read once a claim instead, and each row looked up in them.
		return fmt.Sprintf("(%s IS NULL OR %s NOT IN (SELECT ls.key_value FROM %s ls WHERE ls.limit_name = '%s' AND ls.holder <> '' GROUP BY ls.key_value HAVING COUNT(*) >= %d)) AND ",
			k, w.d.keyText(k), LimitTable, l.Name, l.Max)
	}
	return fmt.Sprintf("(%s IS NULL OR (SELECT COUNT(*) FROM %s ls WHERE ls.limit_name = '%s' AND ls.key_value = %s AND ls.holder <> '') < %d) AND ",
		k, LimitTable, l.Name, w.d.keyText(k), l.Max)
}

// limitReturning is what a claim returns after the table's columns: the
// limit's key as text where it has one, then the rate's.
func (w inboxTable) limitReturning() string {
	var r string
	for _, l := range []Limit{w.t.Limit, w.t.Rate} {
		if l.On() {
			r += ", " + w.d.keyText(w.t.Name+"."+l.Key)
		}
	}
	return r
}

// FreeRowsAfter is how long a free slot's row stays for the next take of
// its key value before the sweep deletes it.
const FreeRowsAfter = 10 * time.Minute

// SlotSQL is every statement of the limit slots.
type SlotSQL struct {
	kind Kind
	// notify, on Postgres, is the channel Free notifies when it frees the
	// slot of a key value whose slots were all held ("" for none).
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
	switch s.kind {
	case Postgres:
		return "$" + strconv.Itoa(n)
	case SQLite:
		return "?" + strconv.Itoa(n)
	}
	return "?"
}

// list writes n placeholders from from on, comma separated.
func (s SlotSQL) list(from, n int) string {
	ps := make([]string, n)
	for i := range ps {
		ps[i] = s.param(from + i)
	}
	return strings.Join(ps, ", ")
}

// Occupied reads the slots held (expired or not) of the key values of
// limit name: one row of key_value, slot each.
func (s SlotSQL) Occupied(name string, keys []string) Call {
	if s.kind == Postgres {
		// Arrays: one text, one plan, whatever the number of keys.
		return Call{SQL: "SELECT key_value, slot FROM " + LimitTable + " WHERE limit_name = $1 AND key_value = ANY($2::text[]) AND holder <> ''", Args: []any{name, keys}}
	}
	args := make([]any, 0, len(keys)+1)
	args = append(args, name)
	for _, k := range keys {
		args = append(args, k)
	}
	return Call{SQL: "SELECT key_value, slot FROM " + LimitTable + " WHERE limit_name = " + s.param(1) +
		" AND key_value IN (" + s.list(2, len(keys)) + ") AND holder <> ''", Args: args}
}

// SlotWant is one slot a claim asks for.
type SlotWant struct {
	Key     string
	Slot    int
	RowID   int64
	Expires time.Time
}

// Take takes the slots wanted that are free, for holder with fence. Where
// it returns rows (Returns), one row_id per slot taken; elsewhere (MySQL)
// Taken reads them back.
func (s SlotSQL) Take(name, holder string, fence int64, want []SlotWant) Call {
	const cols = " (limit_name, key_value, slot, holder, fence, expires_at, row_id) "
	switch s.kind {
	case Postgres:
		keys, slots, exp, ids := make([]string, len(want)), make([]int64, len(want)), make([]int64, len(want)), make([]int64, len(want))
		for i, w := range want {
			keys[i], slots[i], exp[i], ids[i] = w.Key, int64(w.Slot), w.Expires.UnixMicro(), w.RowID
		}
		return Call{SQL: "INSERT INTO " + LimitTable + " AS ls" + cols + `
SELECT $1, k, s, $2, $3, e, r FROM unnest($4::text[], $5::int[], $6::bigint[], $7::bigint[]) AS w(k, s, e, r)
ON CONFLICT (limit_name, key_value, slot) DO UPDATE
    SET holder = excluded.holder, fence = excluded.fence, expires_at = excluded.expires_at, row_id = excluded.row_id
    WHERE ls.holder = ''
RETURNING row_id`, Args: []any{name, holder, fence, keys, slots, exp, ids}}
	case MySQL:
		// Each assignment reads the columns as the ones before it left
		// them: holder, which they all test, is set last.
		var b strings.Builder
		args := make([]any, 0, 7*len(want))
		for i, w := range want {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("(?, ?, ?, ?, ?, ?, ?)")
			args = append(args, name, w.Key, w.Slot, holder, fence, w.Expires.UnixMicro(), w.RowID)
		}
		return Call{SQL: "INSERT INTO " + LimitTable + cols + "VALUES " + b.String() + `
ON DUPLICATE KEY UPDATE fence = IF(holder = '', VALUES(fence), fence), expires_at = IF(holder = '', VALUES(expires_at), expires_at),
    row_id = IF(holder = '', VALUES(row_id), row_id), holder = IF(holder = '', VALUES(holder), holder)`, Args: args}
	}
	var b strings.Builder
	args := make([]any, 0, 3+4*len(want))
	args = append(args, name, holder, fence)
	n := 4
	for i, w := range want {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "(?1, ?%d, ?%d, ?2, ?3, ?%d, ?%d)", n, n+1, n+2, n+3)
		n += 4
		args = append(args, w.Key, w.Slot, w.Expires.UnixMicro(), w.RowID)
	}
	return Call{SQL: "INSERT INTO " + LimitTable + cols + "VALUES " + b.String() + `
ON CONFLICT (limit_name, key_value, slot) DO UPDATE
    SET holder = excluded.holder, fence = excluded.fence, expires_at = excluded.expires_at, row_id = excluded.row_id
    WHERE ` + LimitTable + `.holder = ''
RETURNING row_id`, Args: args}
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

// Free frees the slots of holder given (fenced, so a slot swept and taken
// by another is not freed), at now. On Postgres with a channel it notifies
// it (an empty payload: every subscription of the table) when a freed
// slot's key value had all max slots held.
//
// lazy, on Postgres, commits the free without waiting for its WAL flush
// (synchronous_commit off for its transaction alone): a free that a
// database crash loses leaves its slot held until its expiry, when the
// sweep frees it, the end a dead holder's slot has anyway. Only for slots
// that expire by themselves with their row's lease: a slot kept by a
// heartbeat would be extended for ever by its living holder.
func (s SlotSQL) Free(name, holder string, max int, now time.Time, held []SlotHeld, lazy bool) Call {
	if s.kind == Postgres {
		keys, slots, fences := make([]string, len(held)), make([]int64, len(held)), make([]int64, len(held))
		for i, h := range held {
			keys[i], slots[i], fences[i] = h.Key, int64(h.Slot), h.Fence
		}
		// Each slot is looked up on the primary key (a lateral probe an
		// element) and locked, then updated by its address, as the claim
		// does: joined to the holder's slots, Postgres estimated one row
		// of them and compared every slot with every element (100 frees
		// among 467 slots held: 46,600 comparisons, 60-125 ms loaded).
		from := "unnest($3::text[], $4::int[], $5::bigint[]) AS f(k, s, fe)"
		if lazy {
			from = "(SELECT set_config('synchronous_commit', 'off', true)) AS lazy, " + from
		}
		upd := "UPDATE " + LimitTable + ` ls SET holder = '', expires_at = $6
WHERE ls.ctid = ANY(ARRAY(SELECT x.ctid FROM ` + from + ` CROSS JOIN LATERAL (SELECT c.ctid FROM ` + LimitTable + ` c
    WHERE c.limit_name = $1 AND c.key_value = f.k AND c.slot = f.s AND c.holder = $2 AND c.fence = f.fe FOR UPDATE) AS x))`
		args := []any{name, holder, keys, slots, fences, now.UnixMicro()}
		if s.notify == "" {
			return Call{SQL: upd, Args: args}
		}
		// The count reads the table as the statement found it: max held
		// then means the key value was full, and a claimer may be passing
		// its rows over.
		return Call{SQL: fmt.Sprintf(`WITH freed AS (%s RETURNING ls.key_value)
SELECT pg_notify(%s, '') FROM (SELECT DISTINCT key_value FROM freed) f
WHERE (SELECT COUNT(*) FROM %s c WHERE c.limit_name = $1 AND c.key_value = f.key_value AND c.holder <> '') >= %d`,
			upd, quoteLiteral(s.notify), LimitTable, max), Args: args}
	}
	if s.kind == SQLite {
		// One text whatever the number of slots (a list of ORs was a new
		// text, prepared anew, for every size of batch), each slot looked
		// up on the primary key from a JSON array of [key, slot, fence].
		list, _ := json.Marshal(slotTriples(held))
		return Call{SQL: "UPDATE " + LimitTable + ` SET holder = '', expires_at = ?1 WHERE limit_name = ?2 AND holder = ?3
AND (key_value, slot, fence) IN (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]') FROM json_each(?4))`,
			Args: []any{now.UnixMicro(), name, holder, string(list)}}
	}
	var b strings.Builder
	args := []any{now.UnixMicro(), name, holder}
	n := 4
	for i, h := range held {
		if i > 0 {
			b.WriteString(" OR ")
		}
		fmt.Fprintf(&b, "(key_value = %s AND slot = %s AND fence = %s)", s.param(n), s.param(n+1), s.param(n+2))
		n += 3
		args = append(args, h.Key, h.Slot, h.Fence)
	}
	return Call{SQL: "UPDATE " + LimitTable + " SET holder = '', expires_at = " + s.param(1) + " WHERE limit_name = " + s.param(2) +
		" AND holder = " + s.param(3) + " AND (" + b.String() + ")", Args: args}
}

// slotTriples is held as [key, slot, fence] triples, for a JSON array.
func slotTriples(held []SlotHeld) [][3]any {
	out := make([][3]any, len(held))
	for i, h := range held {
		out[i] = [3]any{h.Key, h.Slot, h.Fence}
	}
	return out
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

// Sweep frees the slots of limit name held past their expiry at now.
func (s SlotSQL) Sweep(name string, now time.Time) Call {
	return Call{SQL: fmt.Sprintf("UPDATE %s SET holder = '' WHERE limit_name = %s AND holder <> '' AND expires_at <= %s", LimitTable, s.param(1), s.param(2)),
		Args: []any{name, now.UnixMicro()}}
}

// Prune deletes the rows of limit name's slots free since before
// FreeRowsAfter from now.
func (s SlotSQL) Prune(name string, now time.Time) Call {
	return Call{SQL: fmt.Sprintf("DELETE FROM %s WHERE limit_name = %s AND holder = '' AND expires_at <= %s", LimitTable, s.param(1), s.param(2)),
		Args: []any{name, now.Add(-FreeRowsAfter).UnixMicro()}}
}

// InUse counts the slots held of limit name, live at now: one row of
// key_value and count per key value, the fullest first, at most max rows.
func (s SlotSQL) InUse(name string, now time.Time, max int) Call {
	return Call{SQL: fmt.Sprintf("SELECT key_value, COUNT(*) FROM %s WHERE limit_name = %s AND holder <> '' AND expires_at > %s GROUP BY key_value ORDER BY COUNT(*) DESC, key_value LIMIT %d",
		LimitTable, s.param(1), s.param(2), max), Args: []any{name, now.UnixMicro()}}
}

// Held reads the slots held of every limit for an operator: one row of
// limit_name, key_value, the slots held and how many of them expired at now
// (held until the sweep frees them, and counted by claims till then) per
// key value, by limit name and the fullest first, at most max rows per
// limit.
func (s SlotSQL) Held(now time.Time, max int) Call {
	return Call{SQL: fmt.Sprintf(`SELECT limit_name, key_value, held, expired FROM (
	SELECT limit_name, key_value, COUNT(*) AS held, SUM(CASE WHEN expires_at <= %s THEN 1 ELSE 0 END) AS expired,
		ROW_NUMBER() OVER (PARTITION BY limit_name ORDER BY COUNT(*) DESC, key_value) AS nth
	FROM %s WHERE holder <> '' GROUP BY limit_name, key_value) AS h
WHERE nth <= %d ORDER BY limit_name, held DESC, key_value`,
		s.param(1), LimitTable, max), Args: []any{now.UnixMicro()}}
}

// NextExpiry reads the earliest expiry among the slots of the key values of
// limit name whose held slots number max or more: when the first of the
// key values a claim passed over gets a slot again (at once where it is
// past: a slot that expired after the claim's sweep). One row, NULL for
// none.
func (s SlotSQL) NextExpiry(name string, max int) Call {
	return Call{SQL: fmt.Sprintf("SELECT MIN(e) FROM (SELECT MIN(expires_at) AS e FROM %s WHERE limit_name = %s AND holder <> '' GROUP BY key_value HAVING COUNT(*) >= %d) AS f",
		LimitTable, s.param(1), max), Args: []any{name}}
}

// Probe reads at most one row of the slot table: the check that it exists.
func (s SlotSQL) Probe() Call {
	return Call{SQL: "SELECT COUNT(*) FROM (SELECT 1 FROM " + LimitTable + " LIMIT 1) AS t"}
}

// quoteLiteral writes s as a SQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// LimitWaiting counts the rows of t that f selects (its group; it sets the
// state) that wait on limit name of key column key (quoted): available,
// of a key value in keys (those whose slots are all held), and holding no
// slot of it (the advisory form leaves a row in work available). One row
// of key value and count per key value, over the first limit such rows in
// id order. A SharedLimit over tables whose rows share an id and a key
// value counts one of them out too: a bound of one per slot held.
func (d *Dialect) LimitWaiting(t AdminTable, f AdminFilter, name, key string, keys []string, limit int) (Call, error) {
	f.States = []string{StateAvailable}
	where, args, err := d.where(t, f)
	if err != nil {
		return Call{}, err
	}
	k := d.keyText(t.Name + "." + key)
	args = append(args, name)
	nameArg := fmt.Sprintf("$%d", len(args))
	var in string
	if d.Kind == Postgres {
		args = append(args, keys)
		in = fmt.Sprintf("%s = ANY($%d::text[])", k, len(args))
	} else {
		ps := make([]string, len(keys))
		for i, v := range keys {
			args = append(args, v)
			ps[i] = fmt.Sprintf("$%d", len(args))
		}
		in = k + " IN (" + strings.Join(ps, ", ") + ")"
	}
	return d.call(fmt.Sprintf(`SELECT k, COUNT(*) FROM (SELECT %s AS k FROM %s WHERE %s AND %s
	AND %s.%s NOT IN (SELECT ls.row_id FROM %s ls WHERE ls.limit_name = %s AND ls.key_value = %s AND ls.holder <> '')
	ORDER BY %s.%s LIMIT %d) AS w GROUP BY k`,
		k, t.Name, where, in, t.Name, t.ID, LimitTable, nameArg, k, t.Name, t.ID, limit), args), nil
}
