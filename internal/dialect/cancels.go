package dialect

import (
	"fmt"
	"time"
)

// Cancel requests (Operator.Cancel) live in a registry table of their own,
// created by migrations.ApplyRegistry, one row per canceled row: every
// registered instance reads them, so one that does not listen still finds
// the handler it runs.
const (
	RegistryCancels = "sqlinbox_cancels"
	// CancelChannel is the NOTIFY channel (and hub channel) a cancel is
	// announced on: registries read the requests at once.
	CancelChannel = "sqlinbox_cancel"
)

// The actions a cancel request asks of its row's holder.
const (
	CancelPark   = "park"
	CancelDelete = "delete"
)

// CancelsSQL is every statement of the cancel requests but the prune, which
// names an inbox table (see PruneCancels).
type CancelsSQL struct {
	// Request records (or replaces) the request to cancel a row.
	Request CancelRequestSQL
	// List reads the requests: table, id, action, reason.
	List PlainSQL
	// Done deletes one request, once its row is parked or deleted.
	Done CancelDoneSQL
}

// CancelRequestSQL records a cancel request.
type CancelRequestSQL struct{ text }

// Call records the request to cancel row id of table with action (park or
// delete) and reason, at now.
func (s CancelRequestSQL) Call(table string, id int64, action, reason string, now time.Time) Call {
	return s.call(table, id, action, reason, now.UnixMilli())
}

// CancelDoneSQL deletes a cancel request.
type CancelDoneSQL struct{ text }

// Call deletes the request of row id of table.
func (s CancelDoneSQL) Call(table string, id int64) Call { return s.call(table, id) }

// Cancels writes the statements of the cancel requests.
func (d *Dialect) Cancels() CancelsSQL {
	x := func(sql string) text { return d.text(sql, Times{}) }
	upsert := " ON CONFLICT (table_name, row_id) DO UPDATE SET action = excluded.action, reason = excluded.reason, requested_at = excluded.requested_at"
	if d.Kind == MySQL {
		upsert = " ON DUPLICATE KEY UPDATE action = VALUES(action), reason = VALUES(reason), requested_at = VALUES(requested_at)"
	}
	return CancelsSQL{
		Request: CancelRequestSQL{x("INSERT INTO " + RegistryCancels + " (table_name, row_id, action, reason, requested_at) VALUES ($1, $2, $3, $4, $5)" + upsert)},
		// Requests live from the call until the row's holder settles it
		// (or the next cancel or unpark of the table prunes them): few.
		List: PlainSQL{x("SELECT table_name, row_id, action, reason FROM " + RegistryCancels + " ORDER BY table_name, row_id LIMIT 10000")},
		Done: CancelDoneSQL{x("DELETE FROM " + RegistryCancels + " WHERE table_name = $1 AND row_id = $2")},
	}
}

// PruneCancelsSQL deletes the cancel requests of one table whose rows are
// gone or parked: nothing is left for a holder to do.
type PruneCancelsSQL struct{ text }

// Call prunes the requests of table (as the operator names it).
func (s PruneCancelsSQL) Call(table string) Call { return s.call(table, s.tm.Encode(Never)) }

// PruneCancels writes PruneCancelsSQL for t.
func (d *Dialect) PruneCancels(t AdminTable) PruneCancelsSQL {
	return PruneCancelsSQL{d.text(fmt.Sprintf("DELETE FROM %s WHERE table_name = $1 AND NOT EXISTS (SELECT 1 FROM %s WHERE %s = %s.row_id AND (%s IS NULL OR %s < $2))",
		RegistryCancels, t.Name, t.ID, RegistryCancels, t.LockedUntil, t.LockedUntil), t.Times)}
}
