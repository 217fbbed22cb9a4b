package dialect

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// GroupsAvailable is the one statement a broker's idle poller sends a poll
// for every idle group subscription of a table: it returns the groups, of
// those asked about, that have a row available now (see
// GroupsAvailableSQL.Call). Each group is one probe of the group's index
// from its floor that stops at the first available row (LIMIT 1 in a
// lateral select), so the statement reads about as much as the claims it
// stands in for, without their writes, commits and round trips. Its SQL()
// is "" for a table without a group column.
//
// SQLite takes the groups as a JSON array and no floors (there a deleted
// row leaves no index entry behind, and claims start at the table's start).
func (d *Dialect) GroupsAvailable(t Table, tm Times) GroupsAvailableSQL {
	x := func(sql string) GroupsAvailableSQL { return GroupsAvailableSQL{text{sql: sql, tm: tm, kind: d.Kind}} }
	if t.Group == "" {
		return x("")
	}
	lu := t.LockedUntil
	if d.Kind == SQLite {
		return x(fmt.Sprintf(`SELECT g.value FROM json_each(?1) AS g WHERE ?2 IS NOT NULL AND EXISTS (SELECT 1 FROM %s WHERE %s = g.value AND (%s IS NULL OR %s <= %s))`,
			t.Name, t.Group, lu, lu, d.Rebind(tm.At(3))))
	}
	if d.Kind == MySQL {
		// As on SQLite, a JSON array of the groups (JSON_TABLE: MariaDB
		// 10.6+, MySQL 8.0+) and no floors.
		return GroupsAvailableSQL{d.text(fmt.Sprintf(`SELECT g.name FROM JSON_TABLE($1, '$[*]' COLUMNS (name VARCHAR(255) PATH '$')) AS g WHERE $2 IS NOT NULL AND EXISTS (SELECT 1 FROM %s WHERE %s = g.name AND (%s IS NULL OR %s <= %s))`,
			t.Name, t.Group, lu, lu, tm.At(3)), tm)}
	}
	// With a priority column claims do not start at the floor (see
	// claimOrder): neither does the probe.
	floor := fmt.Sprintf(" AND %s >= g.floor", t.ID)
	if t.Priority != "" {
		floor = ""
	}
	return x(fmt.Sprintf(`SELECT g.name FROM unnest($1::text[], $2::bigint[]) AS g(name, floor)
CROSS JOIN LATERAL (SELECT 1 FROM %s WHERE %s = g.name%s AND (%s IS NULL OR %s <= %s) LIMIT 1) AS a`,
		t.Name, t.Group, floor, lu, lu, tm.At(3)))
}

// GroupsAvailableSQL is the idle poll of a table's groups (see
// GroupsAvailable).
type GroupsAvailableSQL struct{ text }

// Call asks which of groups have a row available at now, each group's
// claims starting at its floor (claim.Mark's floor, one per group; SQLite
// reads no floors).
func (s GroupsAvailableSQL) Call(groups []string, floors []int64, now time.Time) Call {
	g, f := groupsArgs(s.kind, groups, floors)
	return s.call(g, f, s.tm.Arg(now, 0))
}

// groupsArgs are the groups and floors as GroupsAvailable reads them: on
// Postgres array literals (text, so a wrapping driver binds them as any
// string), on SQLite a JSON array of the groups and a placeholder.
func groupsArgs(kind Kind, groups []string, floors []int64) (any, any) {
	if kind == SQLite || kind == MySQL {
		b, _ := json.Marshal(groups) // strings always marshal
		return string(b), 0
	}
	var g, f strings.Builder
	g.WriteByte('{')
	f.WriteByte('{')
	for i, name := range groups {
		if i > 0 {
			g.WriteByte(',')
			f.WriteByte(',')
		}
		g.WriteByte('"')
		for k := 0; k < len(name); k++ {
			if name[k] == '"' || name[k] == '\\' {
				g.WriteByte('\\')
			}
			g.WriteByte(name[k])
		}
		g.WriteByte('"')
		f.WriteString(strconv.FormatInt(floors[i], 10))
	}
	g.WriteByte('}')
	f.WriteByte('}')
	return g.String(), f.String()
}
