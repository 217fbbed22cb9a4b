package inbox

import (
	"context"
	"errors"
	"fmt"

	iclaim "github.com/sqlinbox/sqlinbox/internal/claim"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/internal/engine"
)

// poller returns the broker's idle poller of the group subscriptions of
// table t: one per table (and its group and time columns), whatever the
// number of groups, so idle groups cost one statement a poll interval in
// all (see engine.Poller).
func (b *Broker) poller(t iclaim.Table) *engine.Poller {
	key := fmt.Sprintf("%s\x00%s\x00%s\x00%s\x00%v", t.Name, t.Group, t.LockedUntil, t.Priority, t.Times)
	if p, ok := b.pollers.Load(key); ok {
		return p.(*engine.Poller)
	}
	query := b.d.GroupsAvailable(t.Table, t.Times)
	find := func(ctx context.Context, groups []string, floors []int64) ([]string, error) {
		q := query.Call(groups, floors, b.clock.Now())
		rows, err := b.db.QueryContext(ctx, q.SQL, q.Args...)
		if err != nil {
			return nil, fmt.Errorf("inbox: idle poll of %d groups of %q: %w", len(groups), t.Unquoted, err)
		}
		defer rows.Close()
		var found []string
		for rows.Next() {
			var name string
			if err := rows.Scan(&name); err != nil {
				return nil, fmt.Errorf("inbox: idle poll of %q: %w", t.Unquoted, err)
			}
			found = append(found, name)
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("inbox: idle poll of %q: %w", t.Unquoted, err)
		}
		return found, nil
	}
	p, _ := b.pollers.LoadOrStore(key, engine.NewPoller(engine.PollerConfig{Table: t.Unquoted, Every: b.poll, Clock: b.clock, Log: b.log, Find: find}))
	return p.(*engine.Poller)
}

// inboxSQL returns the statements of table t, made once per table and
// shared by its subscriptions (each group's made its own: 5.6 MB of 1000
// idle group subscriptions' heap).
func (b *Broker) inboxSQL(t iclaim.Table) *dialect.InboxSQL {
	key := fmt.Sprintf("%#v\x00%v", t.Table, t.Times)
	if s, ok := b.sqls.Load(key); ok {
		return s.(*dialect.InboxSQL)
	}
	sql := b.d.Inbox(t.Table, t.Times)
	s, _ := b.sqls.LoadOrStore(key, &sql)
	return s.(*dialect.InboxSQL)
}

// checkCall is one table check that subscriptions starting at the same
// time share.
type checkCall struct {
	done chan struct{}
	t    iclaim.Table
	err  error
}

// checkShared is checkTable for a subscription: subscriptions of one table
// and row type whose checks overlap share one (1000 group subscriptions
// started together read the catalog once, not 1000 times, and 1000 stacks
// do not grow through the driver at once: 17 MB of the process's heap
// stayed free after such a start). A check that ends before the next
// starts is not reused: a table altered meanwhile is checked again.
func (b *Broker) checkShared(ctx context.Context, table string, s *shape, grouped bool) (iclaim.Table, error) {
	type key struct {
		table   string
		shape   *shape
		grouped bool
	}
	k := key{table, s, grouped}
	b.mu.Lock()
	if c, ok := b.checking[k]; ok {
		b.mu.Unlock()
		select {
		case <-c.done:
		case <-ctx.Done():
			return iclaim.Table{}, ctx.Err()
		}
		if c.err == nil || !errors.Is(c.err, context.Canceled) && !errors.Is(c.err, context.DeadlineExceeded) {
			return c.t, c.err
		}
		return checkTable(ctx, b, table, s, grouped) // the sharer's stop is not this one's
	}
	c := &checkCall{done: make(chan struct{})}
	if b.checking == nil {
		b.checking = map[any]*checkCall{}
	}
	b.checking[k] = c
	b.mu.Unlock()
	c.t, c.err = checkTable(ctx, b, table, s, grouped)
	b.mu.Lock()
	delete(b.checking, k)
	b.mu.Unlock()
	close(c.done)
	return c.t, c.err
}
