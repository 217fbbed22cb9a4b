package inbox

import (
	"context"

	"github.com/sqlinbox/sqlinbox/internal/claim/deps"
)

// startSweep counts s among its table's subscriptions with edges and starts
// the table's sweep (sweepLoop) if none ran; the returned function uncounts
// s and, for the last, stops the sweep and waits for it. The sweep runs at
// once, then on a timer, not at claims: an idle subscription of a group
// sends none (the group poller probes for it), one with a backlog never
// comes back short, and a table's many group subscriptions would each
// sweep it.
func (b *Broker) startSweep(s *Subscription) func() {
	get := func() *bgLoop { return b.sweeps[s.table] }
	set := func(l *bgLoop) {
		if l == nil {
			delete(b.sweeps, s.table)
			return
		}
		if b.sweeps == nil {
			b.sweeps = map[string]*bgLoop{}
		}
		b.sweeps[s.table] = l
	}
	return b.holdLoop(get, set, func(ctx context.Context) { b.sweepLoop(ctx, s.releaser) })
}

// sweepLoop sweeps with r at once, then every depsSweepPolls polls, until
// ctx ends.
func (b *Broker) sweepLoop(ctx context.Context, r *deps.Releaser) {
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
