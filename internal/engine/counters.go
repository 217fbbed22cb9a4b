package engine

import "sync/atomic"

// Counters count what a subscription has done; the claim loop, the
// workers, the watches and settlement each add to them.
type Counters struct {
	claims, claimed, acked, retried, parked, snoozed, lost, released, failed atomic.Int64
}

// Counts is a reading of Counters (inbox.Stats, field for field).
type Counts struct {
	Claims, Claimed, Acked, Retried, Parked, Snoozed, Lost, Released, Failed int64
}

// Read returns the counts so far.
func (c *Counters) Read() Counts {
	return Counts{Claims: c.claims.Load(), Claimed: c.claimed.Load(), Acked: c.acked.Load(), Retried: c.retried.Load(),
		Parked: c.parked.Load(), Snoozed: c.snoozed.Load(), Lost: c.lost.Load(), Released: c.released.Load(), Failed: c.failed.Load()}
}
