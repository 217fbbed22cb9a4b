package inbox

import (
	"context"
	"fmt"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// LimitUse is one limit (see Limit and SharedLimit) as its slots stand:
// the key values with a slot held.
type LimitUse struct {
	Name string // the limit's name: "table:column", or SharedLimit's
	Keys []KeyUse
}

// KeyUse is one key value of a limit with slots held.
type KeyUse struct {
	Key string // the key value, as text
	// Held is the slots held: rows of the key value in work. Claims pass
	// over the key's rows while it equals the limit's n.
	Held int
	// Expired is how many of them are past their hold's end (a holder
	// that died, say): they still count until the next claim's sweep
	// frees them.
	Expired int
}

// LimitKeys bounds the key values Operator.Limits reads, the fullest first.
const LimitKeys = 1000

// Limits reads the slots held of every limit from sqlinbox_limit_slots,
// by limit name, the fullest key values first, at most LimitKeys of them
// all together. A limit with no slot held is not listed; a database without
// the slot table (migrations.ApplyLimits never ran) has no limits: nil, no
// error.
func (o *Operator) Limits(ctx context.Context) ([]LimitUse, error) {
	c := o.b.d.Slots("").Held(o.b.clock.Now(), LimitKeys)
	rows, err := o.b.db.QueryContext(ctx, c.SQL, c.Args...)
	if dialect.IsMissingTable(o.b.d, err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("inbox: read the limit slots (%s): %w", dialect.LimitTable, err)
	}
	defer rows.Close()
	var out []LimitUse
	for rows.Next() {
		var name string
		var k KeyUse
		if err := rows.Scan(&name, &k.Key, &k.Held, &k.Expired); err != nil {
			return nil, fmt.Errorf("inbox: read the limit slots (%s): %w", dialect.LimitTable, err)
		}
		if len(out) == 0 || out[len(out)-1].Name != name {
			out = append(out, LimitUse{Name: name})
		}
		l := &out[len(out)-1]
		l.Keys = append(l.Keys, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("inbox: read the limit slots (%s): %w", dialect.LimitTable, err)
	}
	return out, nil
}
