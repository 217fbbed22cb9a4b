package claim

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// Fair is a claimer that takes rows round-robin between the values of a
// key column (env.Table.Group): each claim asks the table for the next key
// after the last one served that has a row available (dialect.NextKey),
// claims from that key alone through a claimer of the form made for it,
// and goes on to the keys after it only while the claim is short. A
// backlog under one key thus delays a row of another key by at most one
// claim. Each key's claimer keeps its own resume point (Mark), as a group
// subscription does.
//
// In a form that pins a connection per claim (advisory), each key's claim
// pins one: a claim goes on to another key only while the connections
// claims may hold (env.Conns) leave one, probe included, and a claim cut
// short so wakes its subscription (SetWake) to claim again once a
// connection is free, rather than at the poll.
type Fair struct {
	form Form
	env  Env
	next dialect.NextKeySQL

	mu     sync.Mutex
	after  any             // the last key served; nil before the first
	keys   map[any]Claimer // a claimer per key seen
	traits Traits          // the form's, the same for every key
	first  Claimer         // keys[""]'s, made to read the traits
	wake   func()          // wakes the subscription; nil for none
}

// SetWake sets what wakes the subscription that runs f's claims.
func (f *Fair) SetWake(wake func()) {
	f.mu.Lock()
	f.wake = wake
	f.mu.Unlock()
}

// maxFairKeys bounds the claimers a Fair keeps: past it, those that hold no
// connection are dropped (a key's next claimer starts again from its floor).
const maxFairKeys = 1024

// NewFair makes the fair claimer of form over env's table, whose Group is
// the key column; env.Group must be nil.
func NewFair(form Form, env Env) (*Fair, error) {
	f := &Fair{form: form, env: env, next: env.Dialect.NextKey(env.Table.Table, env.Table.Times), keys: map[any]Claimer{}}
	if f.next.SQL() == "" {
		return nil, fmt.Errorf("fair claims of %q: no key column", env.Table.Unquoted)
	}
	c, err := f.claimer("")
	if err != nil {
		return nil, err
	}
	f.first, f.traits = c, c.Traits()
	return f, nil
}

// claimer is key's claimer, made on first use. Call with f.mu held, or
// before f is shared.
func (f *Fair) claimer(key any) (Claimer, error) {
	if c, ok := f.keys[key]; ok {
		return c, nil
	}
	if len(f.keys) >= maxFairKeys {
		for k, c := range f.keys {
			if c.Held() == 0 && c != f.first {
				delete(f.keys, k)
			}
		}
	}
	env := f.env
	env.Group = key
	c, err := f.form.New(env)
	if err != nil {
		return nil, err
	}
	f.keys[key] = c
	return c, nil
}

// Traits are the form's.
func (f *Fair) Traits() Traits { return f.traits }

// Held sums what the keys' claimers hold.
func (f *Fair) Held() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.keys {
		n += c.Held()
	}
	return n
}

// Claim takes up to max rows: from the next key with rows after the last
// one served, then, while short, from the keys after it, each key once.
func (f *Fair) Claim(ctx context.Context, max int) ([]*Job, error) {
	var jobs []*Job
	seen := map[any]bool{}
	for len(jobs) < max {
		if len(jobs) > 0 && f.traits.PinsConnection && f.Held() >= f.env.Conns {
			f.mu.Lock()
			wake := f.wake
			f.mu.Unlock()
			if wake != nil {
				wake()
			}
			return jobs, nil
		}
		key, c, err := f.nextKey(ctx)
		if err != nil || c == nil || seen[key] {
			return jobs, err
		}
		seen[key] = true
		got, err := c.Claim(ctx, max-len(jobs))
		jobs = append(jobs, got...)
		if err != nil {
			return jobs, err
		}
	}
	return jobs, nil
}

// nextKey finds the next key with an available row and its claimer, and
// moves the round on to it; a nil claimer means no key has one.
func (f *Fair) nextKey(ctx context.Context) (any, Claimer, error) {
	e := &f.env
	f.mu.Lock()
	after := f.after
	f.mu.Unlock()
	q := f.next.Call(after, e.Clock.Now())
	key, err := f.probe(ctx, q)
	if err != nil {
		return nil, nil, fmt.Errorf("claim from %q: find the next key with rows: %w", e.Table.Unquoted, err)
	}
	if key == nil {
		return nil, nil, nil
	}
	if b, ok := key.([]byte); ok {
		key = string(b)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.after = key
	c, err := f.claimer(key)
	if err != nil {
		return nil, nil, err
	}
	return key, c, nil
}

// probe runs the probe for the next key, prepared once (a claim's every
// step sends it: on SQLite preparing it anew each time cost more than
// running it), and returns the key, nil for none.
func (f *Fair) probe(ctx context.Context, q dialect.Call) (any, error) {
	stmts := f.env.Stmts
	if stmts == nil {
		stmts = dialect.PlainStmts(f.env.DB)
	}
	rows, err := stmts.QueryContext(ctx, q.SQL, q.Args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	if !rows.Next() {
		return nil, rows.Err()
	}
	var key any
	var wrapped int
	if err := rows.Scan(&key, &wrapped); err != nil {
		return nil, err
	}
	if key == nil {
		return nil, errors.New("the key column holds NULL")
	}
	return key, rows.Close()
}
