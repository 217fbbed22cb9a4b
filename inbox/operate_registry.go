package inbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// Pause stops every registered instance from claiming table (or its group
// when group is not ""): within a heartbeat, and at once on Postgres for
// brokers with ListenNotify. Running handlers finish. Idempotent.
func (o *Operator) Pause(ctx context.Context, table, group string) error {
	if err := dialect.CheckTableName(table); err != nil {
		return fmt.Errorf("inbox: pause: table name: %w", err)
	}
	if err := o.b.write(ctx, false, func(ex execer) error {
		q := o.sql.Pause.Call(table, group, o.b.clock.Now())
		_, err := ex.ExecContext(ctx, q.SQL, q.Args...)
		return err
	}); err != nil {
		return fmt.Errorf("inbox: pause %q: %w (did migrations.ApplyRegistry run?)", table, err)
	}
	o.wake(ctx, dialect.PauseChannel, "")
	return nil
}

// Resume undoes Pause of table (or its group); the subscriptions claim at
// once where the resume reaches them (their heartbeat, or a notification).
func (o *Operator) Resume(ctx context.Context, table, group string) error {
	if err := o.b.write(ctx, false, func(ex execer) error {
		q := o.sql.Resume.Call(table, group)
		_, err := ex.ExecContext(ctx, q.SQL, q.Args...)
		return err
	}); err != nil {
		return fmt.Errorf("inbox: resume %q: %w (did migrations.ApplyRegistry run?)", table, err)
	}
	o.wake(ctx, dialect.PauseChannel, "")
	return nil
}

// Instance is one service instance as the registry holds it.
type Instance struct {
	ID, Service, Version, Host string
	PID                        int
	Started, Heartbeat         time.Time
	Every                      time.Duration // its heartbeat interval
	// Alive: its heartbeat is less than three intervals old, or less than
	// five seconds.
	Alive bool
	// PickupFallback says why rows other processes write wait for the
	// instance's poll, as its subscriptions' Stats().PickupFallback does
	// (transaction pooling without ListenURL); "" when they do not.
	PickupFallback string
	Subscriptions  []RegisteredSubscription
}

// RegisteredSubscription is one subscription of an instance.
type RegisteredSubscription struct {
	Name, Table, Group, Form string
	Workers                  int
	Lease                    time.Duration
	Roles                    map[Role]string
	// Limits are its limits per key (Limit, SharedLimit); nil without, and
	// for an instance of a version that did not record them.
	Limits []LimitSpec
}

// Instances lists the registered instances, alive or gone.
func (o *Operator) Instances(ctx context.Context) ([]Instance, error) {
	rows, err := o.b.db.QueryContext(ctx, o.sql.Instances.Call().SQL)
	if err != nil {
		return nil, fmt.Errorf("inbox: list instances: %w (did migrations.ApplyRegistry run?)", err)
	}
	defer rows.Close()
	now := o.b.clock.Now()
	var out []Instance
	byID := map[string]int{}
	for rows.Next() {
		var in Instance
		var started, beat, every int64
		if err := rows.Scan(&in.ID, &in.Service, &in.Version, &in.Host, &in.PID, &started, &beat, &every, &in.PickupFallback); err != nil {
			return nil, fmt.Errorf("inbox: list instances: %w", err)
		}
		in.Started, in.Heartbeat, in.Every = time.UnixMilli(started), time.UnixMilli(beat), time.Duration(every)*time.Millisecond
		in.Alive = now.Sub(in.Heartbeat) < max(staleBeats*in.Every, staleFloor)
		byID[in.ID] = len(out)
		out = append(out, in)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("inbox: list instances: %w", err)
	}
	rows.Close()
	subs, err := o.b.db.QueryContext(ctx, o.sql.Subscriptions.Call().SQL)
	if err != nil {
		return nil, fmt.Errorf("inbox: list subscriptions: %w (a registry made before limit_spec: run migrations.ApplyRegistry, or inbox migrate-registry)", err)
	}
	defer subs.Close()
	for subs.Next() {
		var inst, roles string
		var limits sql.NullString
		var pos int
		var lease int64
		var s RegisteredSubscription
		if err := subs.Scan(&inst, &pos, &s.Name, &s.Table, &s.Group, &s.Form, &s.Workers, &lease, &roles, &limits); err != nil {
			return nil, fmt.Errorf("inbox: list subscriptions: %w", err)
		}
		s.Lease = time.Duration(lease) * time.Millisecond
		_ = json.Unmarshal([]byte(roles), &s.Roles)
		if limits.Valid {
			_ = json.Unmarshal([]byte(limits.String), &s.Limits)
		}
		if i, ok := byID[inst]; ok {
			out[i].Subscriptions = append(out[i].Subscriptions, s)
		}
	}
	return out, subs.Err()
}

// QueueInfo is one queue the registry knows of: subscribed by an instance,
// or paused.
type QueueInfo struct {
	QueueRef
	Instances int // alive instances subscribed
	// Polled is how many of them pick up rows other processes write at
	// their poll, not by notification (see Instance.PickupFallback).
	Polled  int
	Workers int // their workers, all together
	Paused  bool
	// TablePaused: paused by a pause of the whole table (a group's
	// subscriptions stop then too; resume the table, not the group).
	TablePaused bool
	State       QueueState
	StateErr    error // the count failed (a table gone, say); State is zero
}

// Queues lists the queues the registry knows, with their rows by state.
func (o *Operator) Queues(ctx context.Context) ([]QueueInfo, error) {
	insts, err := o.Instances(ctx)
	if err != nil {
		return nil, err
	}
	paused, err := o.Paused(ctx)
	if err != nil {
		return nil, err
	}
	byKey := map[[2]string]*QueueInfo{}
	get := func(table, group string) *QueueInfo {
		k := [2]string{table, group}
		if q := byKey[k]; q != nil {
			return q
		}
		q := &QueueInfo{QueueRef: QueueRef{Table: table, Group: group}}
		byKey[k] = q
		return q
	}
	for _, in := range insts {
		for _, s := range in.Subscriptions {
			q := get(s.Table, s.Group)
			if q.Roles == nil || in.Alive {
				q.Roles, q.Lease = s.Roles, s.Lease
			}
			if in.Alive {
				q.Instances++
				q.Workers += s.Workers
				if in.PickupFallback != "" {
					q.Polled++
				}
			}
		}
	}
	subscribed := map[string]bool{} // tables with a registered subscription
	for k := range byKey {
		subscribed[k[0]] = true
	}
	for _, p := range paused {
		if p[1] == "" && subscribed[p[0]] {
			continue // marked on the table's subscriptions below
		}
		get(p[0], p[1]).Paused = true
	}
	tablePaused := map[string]bool{}
	for _, p := range paused {
		if p[1] == "" {
			tablePaused[p[0]] = true
		}
	}
	out := make([]QueueInfo, 0, len(byKey))
	for _, q := range byKey {
		// A pause of the whole table stops its group subscriptions too.
		q.TablePaused = tablePaused[q.Table]
		q.Paused = q.Paused || q.TablePaused
		if q.Roles == nil {
			// Paused, but no subscription to its group: any subscription of
			// the table names its columns.
			if ref, ok := lookupIn(insts, q.Table, q.Group); ok {
				q.Roles, q.Lease = ref.Roles, ref.Lease
			}
		}
		if q.Roles == nil {
			q.StateErr = noSubscription(q.Table)
		} else {
			q.State, q.StateErr = o.State(ctx, q.QueueRef)
		}
		out = append(out, *q)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Table != out[j].Table {
			return out[i].Table < out[j].Table
		}
		return out[i].Group < out[j].Group
	})
	return out, nil
}

// Paused lists the paused queues as (table, group) pairs.
func (o *Operator) Paused(ctx context.Context) ([][2]string, error) {
	rows, err := o.b.db.QueryContext(ctx, o.sql.Paused.Call().SQL)
	if err != nil {
		return nil, fmt.Errorf("inbox: list paused queues: %w (did migrations.ApplyRegistry run?)", err)
	}
	defer rows.Close()
	var out [][2]string
	for rows.Next() {
		var t, g string
		var at int64
		if err := rows.Scan(&t, &g, &at); err != nil {
			return nil, err
		}
		out = append(out, [2]string{t, g})
	}
	return out, rows.Err()
}

// Ref returns the registered roles and lease of table and group, from any
// subscription of it (an alive one first), or ok false when none is
// registered.
func (o *Operator) Ref(ctx context.Context, table, group string) (ref QueueRef, ok bool, err error) {
	insts, err := o.Instances(ctx)
	if err != nil {
		return QueueRef{}, false, err
	}
	for _, alive := range []bool{true, false} {
		for _, in := range insts {
			for _, s := range in.Subscriptions {
				if in.Alive == alive && s.Table == table && (s.Group == group || s.Group == "") {
					return QueueRef{Table: table, Group: group, Roles: s.Roles, Lease: s.Lease}, true, nil
				}
			}
		}
	}
	return QueueRef{Table: table, Group: group}, false, nil
}

// Lookup returns the QueueRef of table and group with the columns and lease
// of a registered subscription to table: one to that group first, then one
// to the whole table, then one to any of its groups (a table's columns are
// the same whichever group reads it), alive instances before gone ones. ok
// is false when no subscription to table is registered. Unlike Ref, it
// answers for a group nobody subscribes to: it names columns, it does not
// say the queue is registered.
func (o *Operator) Lookup(ctx context.Context, table, group string) (ref QueueRef, ok bool, err error) {
	insts, err := o.Instances(ctx)
	if err != nil {
		return QueueRef{}, false, err
	}
	ref, ok = lookupIn(insts, table, group)
	return ref, ok, nil
}

func lookupIn(insts []Instance, table, group string) (QueueRef, bool) {
	for _, match := range []func(g string) bool{
		func(g string) bool { return g == group },
		func(g string) bool { return g == "" },
		func(string) bool { return true },
	} {
		for _, alive := range []bool{true, false} {
			for _, in := range insts {
				for _, s := range in.Subscriptions {
					if in.Alive == alive && s.Table == table && match(s.Group) {
						return QueueRef{Table: table, Group: group, Roles: s.Roles, Lease: s.Lease}, true
					}
				}
			}
		}
	}
	return QueueRef{Table: table, Group: group}, false
}

// ErrNoSubscription is the error of a queue whose columns no registered
// subscription names: Queues sets it as the StateErr of a queue paused
// without one, rather than guess the table's columns.
var ErrNoSubscription = errors.New("no registered subscription")

func noSubscription(table string) error {
	return fmt.Errorf("inbox: %w to %s names its columns", ErrNoSubscription, table)
}
