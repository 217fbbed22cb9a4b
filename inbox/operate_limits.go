package inbox

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// LimitUse is one limit (see Limit and SharedLimit) as its slots stand:
// its n and key column as the registry records them, and the key values
// with a slot held.
type LimitUse struct {
	Name string // the limit's name: "table:column", or SharedLimit's
	// Column is the key column, as the registered subscriptions of the
	// limit record it ("a, b" for a SharedLimit whose tables name it
	// differently); "" when no registered subscription records the limit
	// (the service is not registered, or an earlier version).
	Column string
	// N is how many rows of one key value may be in work at once: the
	// greatest the registered subscriptions record (they differ while a
	// change of it is rolled out); 0 when unknown, as Column.
	N int
	// Per is a rate's window (Rate): N then counts the handlings of one
	// key value started per Per, and Held the starts in the last window
	// (Expired: older ones the next claim frees). 0 for a limit, and when
	// unknown.
	Per time.Duration
	// Tables are the tables of the registered subscriptions of the limit.
	Tables []string
	// Keys are the key values with a slot held, the busiest first: the
	// most slots held, then the most rows waiting; at most LimitKeys.
	Keys []KeyUse
	// WaitingCapped: a count of rows waiting read Operator.CountLimit rows
	// of a queue and stopped; the Waiting figures are lower bounds.
	WaitingCapped bool
}

// OnTable says whether rows of table take the limit's slots: a registered
// subscription of table records it, or it is named after table (Limit's
// "table:column").
func (l LimitUse) OnTable(table string) bool {
	return slices.Contains(l.Tables, table) || strings.HasPrefix(l.Name, table+":")
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
	// Waiting is the rows of the key value that claims pass over because
	// its slots are all held (Held at least N): available, in the queues
	// of the limit's registered subscriptions, and not in work. 0 when
	// slots are free, and when N is unknown.
	Waiting int64
}

// LimitKeys bounds the key values Operator.Limits reads per limit, the
// fullest first.
const LimitKeys = 1000

// Limits reads the slots held of every limit from sqlinbox_limit_slots, and
// each limit's n, key column and queues from the registry's subscriptions
// (those of live instances, and of gone ones for a limit no live instance
// records), by limit name. A limit a registered subscription records is
// listed with no slot held too. For a key value whose slots are all held,
// it counts the rows waiting in each queue of the limit: one statement per
// queue with a full key value, over at most CountLimit rows. A database
// without the slot table or the registry reads without them: with neither,
// nil and no error.
func (o *Operator) Limits(ctx context.Context) ([]LimitUse, error) {
	specs, err := o.limitSpecs(ctx)
	if err != nil {
		return nil, err
	}
	held, err := o.limitsHeld(ctx)
	if err != nil {
		return nil, err
	}
	var out []LimitUse
	for _, name := range limitNames(specs, held) {
		l := LimitUse{Name: name, Keys: held[name]}
		if s := specs[name]; s != nil {
			l.Column, l.N, l.Per, l.Tables = s.columns(), s.n, s.per, s.tables()
			if err := o.countWaiting(ctx, &l, s); err != nil {
				return nil, err
			}
		}
		slices.SortStableFunc(l.Keys, func(a, b KeyUse) int {
			return cmp.Or(cmp.Compare(b.Held, a.Held), cmp.Compare(b.Waiting, a.Waiting), strings.Compare(a.Key, b.Key))
		})
		out = append(out, l)
	}
	return out, nil
}

// limitsHeld reads the slots held per limit name and key value; no slot
// table is none.
func (o *Operator) limitsHeld(ctx context.Context) (map[string][]KeyUse, error) {
	c := o.b.d.Slots("").Held(o.b.clock.Now(), LimitKeys)
	rows, err := o.b.db.QueryContext(ctx, c.SQL, c.Args...)
	if dialect.IsMissingTable(o.b.d, err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("inbox: read the limit slots (%s): %w", dialect.LimitTable, err)
	}
	defer rows.Close()
	out := map[string][]KeyUse{}
	for rows.Next() {
		var name string
		var k KeyUse
		if err := rows.Scan(&name, &k.Key, &k.Held, &k.Expired); err != nil {
			return nil, fmt.Errorf("inbox: read the limit slots (%s): %w", dialect.LimitTable, err)
		}
		out[name] = append(out[name], k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("inbox: read the limit slots (%s): %w", dialect.LimitTable, err)
	}
	return out, nil
}

// limitNames are the names of the limits recorded or held, sorted.
func limitNames(specs map[string]*limitQueues, held map[string][]KeyUse) []string {
	var names []string
	for n := range specs {
		names = append(names, n)
	}
	for n := range held {
		if specs[n] == nil {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

// limitQueues is one limit as the registry records it: its greatest n and
// the queues whose subscriptions take its slots.
type limitQueues struct {
	n      int
	per    time.Duration // a rate's window
	queues []limitQueue
}

// limitQueue is one queue of a limit, its key column named.
type limitQueue struct {
	ref    QueueRef
	column string
}

func (s *limitQueues) columns() string {
	var cols []string
	for _, q := range s.queues {
		if !slices.Contains(cols, q.column) {
			cols = append(cols, q.column)
		}
	}
	return strings.Join(cols, ", ")
}

func (s *limitQueues) tables() []string {
	var ts []string
	for _, q := range s.queues {
		if !slices.Contains(ts, q.ref.Table) {
			ts = append(ts, q.ref.Table)
		}
	}
	return ts
}

// add records a queue of the limit: a subscription of a table's group is
// not added again where the whole table is (group "").
func (s *limitQueues) add(q limitQueue) {
	if slices.ContainsFunc(s.queues, func(h limitQueue) bool {
		return h.ref.Table == q.ref.Table && h.column == q.column && (h.ref.Group == "" || h.ref.Group == q.ref.Group)
	}) {
		return
	}
	if q.ref.Group == "" {
		s.queues = slices.DeleteFunc(s.queues, func(h limitQueue) bool { return h.ref.Table == q.ref.Table && h.column == q.column })
	}
	s.queues = append(s.queues, q)
}

// limitSpecs reads the limits the registry's subscriptions record, by
// name: those of live instances, then those of gone ones for the limits no
// live instance records. No registry is none.
func (o *Operator) limitSpecs(ctx context.Context) (map[string]*limitQueues, error) {
	insts, err := o.Instances(ctx)
	if err != nil {
		if o.registryMissing(ctx) {
			return nil, nil
		}
		return nil, err
	}
	out := map[string]*limitQueues{}
	for _, alive := range []bool{true, false} {
		seen := map[string]bool{}
		for _, in := range insts {
			if in.Alive != alive {
				continue
			}
			for _, sub := range in.Subscriptions {
				for _, sp := range sub.Limits {
					if sp.Kind != LimitKindInWork && sp.Kind != LimitKindRate || (!alive && out[sp.Name] != nil && !seen[sp.Name]) {
						continue
					}
					seen[sp.Name] = true
					l := out[sp.Name]
					if l == nil {
						l = &limitQueues{}
						out[sp.Name] = l
					}
					l.n, l.per = max(l.n, sp.N), max(l.per, sp.Per)
					l.add(limitQueue{ref: QueueRef{Table: sub.Table, Group: sub.Group, Roles: sub.Roles, Lease: sub.Lease}, column: sp.Column})
				}
			}
		}
	}
	return out, nil
}

// registryMissing says the registry's subscriptions table does not exist.
func (o *Operator) registryMissing(ctx context.Context) bool {
	rows, err := o.b.db.QueryContext(ctx, "SELECT 1 FROM "+dialect.RegistrySubscriptions+" WHERE 1 = 0")
	if err == nil {
		rows.Close()
	}
	return dialect.IsMissingTable(o.b.d, err)
}

// countWaiting sets the rows waiting of l's full key values, summed over
// the limit's queues.
func (o *Operator) countWaiting(ctx context.Context, l *LimitUse, s *limitQueues) error {
	var full []string
	at := map[string]int{}
	for i, k := range l.Keys {
		if s.n > 0 && k.Held >= s.n {
			full = append(full, k.Key)
			at[k.Key] = i
		}
	}
	if len(full) == 0 {
		return nil
	}
	limit := o.CountLimit
	if limit <= 0 {
		limit = DefaultCountLimit
	}
	for _, q := range s.queues {
		if err := dialect.CheckIdent(q.column); err != nil {
			return fmt.Errorf("inbox: limit %q: key column of table %q: %w", l.Name, q.ref.Table, err)
		}
		t, err := o.adminTable(ctx, q.ref)
		if err != nil {
			return fmt.Errorf("inbox: limit %q: %w", l.Name, err)
		}
		c, err := o.b.d.LimitWaiting(t, o.filter(q.ref), l.Name, o.b.d.Quote(q.column), full, limit)
		if err != nil {
			return fmt.Errorf("inbox: limit %q: table %q: %w", l.Name, q.ref.Table, err)
		}
		n, err := o.readWaiting(ctx, c, l, at)
		if err != nil {
			return fmt.Errorf("inbox: limit %q: count the rows waiting in %q: %w", l.Name, q.ref.Table, err)
		}
		l.WaitingCapped = l.WaitingCapped || n >= int64(limit)
	}
	return nil
}

// readWaiting adds the counts c reads to l's keys (at: a key's index) and
// returns the rows it counted.
func (o *Operator) readWaiting(ctx context.Context, c dialect.Call, l *LimitUse, at map[string]int) (int64, error) {
	rows, err := o.b.db.QueryContext(ctx, c.SQL, c.Args...)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var total int64
	for rows.Next() {
		var key string
		var n int64
		if err := rows.Scan(&key, &n); err != nil {
			return 0, err
		}
		total += n
		if i, ok := at[key]; ok {
			l.Keys[i].Waiting += n
		}
	}
	return total, rows.Err()
}

// LimitWaiting counts the rows of s's queue that wait on its limit now:
// available rows of the key values whose slots are all held, not in work
// (see KeyUse.Waiting), over at most CountLimit rows and the LimitKeys
// fullest key values. It reads s's limit from s, not from the registry: a
// service need not be registered. 0 for a subscription without a limit.
// Of a subscription with a Limit and a Rate, the sum of both counts: a row
// that waits on both is counted twice.
func (o *Operator) LimitWaiting(ctx context.Context, s *Subscription) (int64, error) {
	if s.cfg.limit == nil && s.cfg.rate == nil {
		return 0, nil
	}
	held, err := o.limitsHeld(ctx)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, l := range []*limitConfig{s.cfg.limit, s.cfg.rate} {
		if l == nil {
			continue
		}
		u := LimitUse{Name: s.limitName(l), Keys: held[s.limitName(l)]}
		if err := o.countWaiting(ctx, &u, &limitQueues{n: l.max, queues: []limitQueue{{ref: s.Queue(), column: l.column}}}); err != nil {
			return 0, err
		}
		for _, k := range u.Keys {
			n += k.Waiting
		}
	}
	return n, nil
}
