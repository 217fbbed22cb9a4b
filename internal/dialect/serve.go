package dialect

import (
	"slices"
	"strings"
)

// Serves reports whether an index of idx (a table's, as Indexes reads
// them) serves a walk of rows in the order of cols: one that is not
// partial and whose leading key columns are cols, counting the columns the
// engine keeps at the end of every index. On SQLite that is the rowid,
// which an INTEGER PRIMARY KEY column names (reported as index "rowid"); on
// MariaDB/MySQL (InnoDB) the primary key's columns. An index wider than
// cols serves too: (group, priority, id) serves a claim of one group by
// priority, and on SQLite (group) alone serves one by id.
func (d *Dialect) Serves(idx []Index, cols []string) bool {
	return d.servedBy(idx, cols, false) != ""
}

// PartialServing names a partial index of idx that would serve cols were
// it whole, "" for none: a claim's condition does not imply an index's
// WHERE, so the planner cannot use it for the walk.
func (d *Dialect) PartialServing(idx []Index, cols []string) string {
	return d.servedBy(idx, cols, true)
}

func (d *Dialect) servedBy(idx []Index, cols []string, partial bool) string {
	suffix := d.implicitSuffix(idx)
	for _, ix := range idx {
		if ix.Partial != partial {
			continue
		}
		key := slices.Clip(ix.Columns)
		for _, c := range suffix {
			if !slices.Contains(key, c) {
				key = append(key, c)
			}
		}
		if len(key) >= len(cols) && slices.Equal(key[:len(cols)], cols) {
			return ix.Name
		}
	}
	return ""
}

// implicitSuffix is what the engine keeps after the key columns of every
// index of the table: SQLite's rowid where a column names it, InnoDB's
// primary key.
func (d *Dialect) implicitSuffix(idx []Index) []string {
	for _, ix := range idx {
		switch {
		case d.Kind == SQLite && ix.Name == "rowid",
			d.Kind == MySQL && strings.EqualFold(ix.Name, "PRIMARY"):
			return ix.Columns
		}
	}
	return nil
}
