package engine

import (
	"sync/atomic"

	"github.com/sqlinbox/sqlinbox/internal/inboxtype"
)

// Counters count what a subscription has done; the claim loop, the
// workers, the watches and settlement each add to them.
type Counters struct {
	claims, claimed, acked, retried, parked, snoozed, lost, released, failed, canceled atomic.Int64
}

// Read returns the counts so far.
func (c *Counters) Read() inboxtype.Stats {
	return inboxtype.Stats{Claims: c.claims.Load(), Claimed: c.claimed.Load(), Acked: c.acked.Load(), Retried: c.retried.Load(),
		Parked: c.parked.Load(), Snoozed: c.snoozed.Load(), Lost: c.lost.Load(), Released: c.released.Load(), Failed: c.failed.Load(),
		Canceled: c.canceled.Load()}
}
