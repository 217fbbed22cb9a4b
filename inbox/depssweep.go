package inbox

import (
	"context"

	"github.com/sqlinbox/sqlinbox/internal/claim/deps"
)

// tableSweep sweeps one table's stranded edges (deps.Releaser.Sweep) while
// any subscription of the table runs in this broker: at once, then on a
// timer. Not at claims: an idle subscription of a group sends none (the
// group poller probes for it), one with a backlog never comes back short,
// and a table's many group subscriptions would each sweep it.
type tableSweep struct {
	refs int
	stop context.CancelFunc
	done chan struct{}
}

// startSweep counts s among its table's subscriptions with edges and starts
// the table's sweep if none ran; the returned function uncounts s and, for
// the last, stops the sweep and waits for it.
func (b *Broker) startSweep(s *Subscription) func() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sweeps == nil {
		b.sweeps = map[string]*tableSweep{}
	}
	ts := b.sweeps[s.table]
	if ts == nil {
		ctx, stop := context.WithCancel(context.Background())
		ts = &tableSweep{stop: stop, done: make(chan struct{})}
		b.sweeps[s.table] = ts
		go b.sweepLoop(ctx, s.releaser, ts.done)
	}
	ts.refs++
	return func() {
		b.mu.Lock()
		ts.refs--
		last := ts.refs == 0
		if last {
			delete(b.sweeps, s.table)
		}
		b.mu.Unlock()
		if last {
			ts.stop()
			<-ts.done
		}
	}
}

// sweepLoop sweeps with r at once, then every depsSweepPolls polls, until
// ctx ends.
func (b *Broker) sweepLoop(ctx context.Context, r *deps.Releaser, done chan struct{}) {
	defer close(done)
	for {
		r.Sweep(ctx)
		t := b.clock.NewTimer(depsSweepPolls * b.poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}
