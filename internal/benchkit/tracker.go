// Package benchkit is what the bench command and the side-by-side bench
// module share: filling a table by plain SQL, draining it with the library
// or with the bare claim and ack statements, and counting every handling by
// row id so duplicates and lost rows are counted, never assumed.
package benchkit

import (
	"math/bits"
	"sync/atomic"
)

// Tracker counts handlings of the rows first..first+n-1: two bits a row
// (seen, seen again), so a million rows cost 250 KB and the figure of
// memory is not the tracker's.
type Tracker struct {
	first int64
	n     int
	seen  []atomic.Uint32
	again []atomic.Uint32
	dups  atomic.Int64
	stray atomic.Int64
	total atomic.Int64
}

// NewTracker tracks n rows whose ids run from first.
func NewTracker(first int64, n int) *Tracker {
	w := (n + 31) / 32
	return &Tracker{first: first, n: n, seen: make([]atomic.Uint32, w), again: make([]atomic.Uint32, w)}
}

// Handle records one handling of row id.
func (t *Tracker) Handle(id int64) {
	t.total.Add(1)
	i := id - t.first
	if i < 0 || i >= int64(t.n) {
		t.stray.Add(1)
		return
	}
	word, bit := i/32, uint32(1)<<(i%32)
	if t.seen[word].Or(bit)&bit == 0 {
		return
	}
	if t.again[word].Or(bit)&bit == 0 {
		t.dups.Add(1)
	}
}

// Handled is the number of handlings so far, duplicates included.
func (t *Tracker) Handled() int64 { return t.total.Load() }

// Duplicates is the number of rows handled more than once.
func (t *Tracker) Duplicates() int64 { return t.dups.Load() }

// Stray is the number of handlings of ids outside the tracked range.
func (t *Tracker) Stray() int64 { return t.stray.Load() }

// Lost is the number of tracked rows never handled.
func (t *Tracker) Lost() int64 {
	seen := 0
	for i := range t.seen {
		seen += bits.OnesCount32(t.seen[i].Load())
	}
	return int64(t.n - seen)
}
