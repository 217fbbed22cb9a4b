package inbox

import (
	"context"
	"fmt"
	"time"
)

// Minute is one minute of a queue's handlings, added up over every
// registered instance (Service.Register records them).
type Minute struct {
	At      time.Time // the minute's start
	Outcome Outcome
	Handled int64
	Mean    time.Duration // mean handling time
	Max     time.Duration // longest handling
}

// Minutes lists the recorded minutes of table (and group; "" for the
// table's ungrouped subscriptions) from since on, oldest first.
func (o *Operator) Minutes(ctx context.Context, table, group string, since time.Time) ([]Minute, error) {
	q := o.sql.Minutes.Call(table, group, since)
	rows, err := o.b.db.QueryContext(ctx, q.SQL, q.Args...)
	if err != nil {
		return nil, fmt.Errorf("inbox: minutes of %q: %w (did migrations.ApplyRegistry run?)", table, err)
	}
	defer rows.Close()
	var out []Minute
	for rows.Next() {
		var at, handled, total, longest int64
		var outcome string
		if err := rows.Scan(&at, &outcome, &handled, &total, &longest); err != nil {
			return nil, fmt.Errorf("inbox: minutes of %q: %w", table, err)
		}
		m := Minute{At: time.UnixMilli(at), Outcome: Outcome(outcome), Handled: handled, Max: time.Duration(longest) * time.Microsecond}
		if handled > 0 {
			m.Mean = time.Duration(total/handled) * time.Microsecond
		}
		out = append(out, m)
	}
	return out, rows.Err()
}
