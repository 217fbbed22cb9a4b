package claim

import (
	"database/sql"
	"math"
	"sync"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/claim/contract"
)

// Mark is where a form's next claim starts walking the table's primary key.
//
// On Postgres a claim that walks the key from its start steps over the dead
// index entries of every row acked since the last vacuum, and under a backlog
// that walk becomes the largest part of a drain's CPU. So while claims find
// what they ask for, the next one starts at the least id the last one took; a
// claim that comes back short, or Rescan since the last such walk, starts at
// the floor instead. A row behind the mark that becomes available again (a
// lease run out, a retry come due, a delayed publish, a rolled-back hold)
// waits one Rescan (the poll interval) at most; one the claimer gave back
// itself (Released) is found by its next claim.
//
// The floor is where the table's live rows begin: the least id of any row
// (held or not) at the last floor read, or, when none was left, one past
// the greatest id this claimer took; before the first read, the table's
// start. A form that has a floor statement reads it at most once a Rescan,
// and only after it took rows since the last read, so an idle claimer
// sends none; and every DeepRescans Rescans it reads it from the table's
// start. Every row that exists when the floor is read is at or above it,
// so leases, retries and delays are found within one Rescan as before. A
// row can appear below the floor only if it commits after the read with a
// smaller id than every row then live (a transaction that took its id
// from the sequence before another's and committed after the floor read,
// or an id the publisher wrote): that row waits for the next read from
// the start, (DeepRescans+1) Rescans at most. Without a floor read the
// floor is the table's start, as before (SQLite, where a deleted row
// leaves no index entry behind).
type Mark struct {
	mu      sync.Mutex
	marked  bool  // the last claim was full: the next starts at from
	from    int64 // the least id the last full claim took
	scanned time.Time
	// A row this claimer gave back may lie behind the mark: the next claim
	// starts at the floor, whatever claims in flight then record.
	released bool

	floor          int64     // where the live rows begin (see Mark)
	read           bool      // the floor was read at least once
	readAt         time.Time // the last floor read
	deepAt         time.Time // the last floor read from the table's start
	takenSinceRead bool      // rows were taken since the last floor read
	hi             int64     // the greatest id taken
	hiSet          bool      // hi is set
}

// DeepRescans is how many Rescans pass between floor reads from the
// table's start (see Mark).
const DeepRescans = contract.DeepRescans

// FarRoundTrip is the database's round trip (a ping) from which a form
// may keep more in flight (see contract.FarRoundTrip).
const FarRoundTrip = contract.FarRoundTrip

// Start returns the least id the next claim looks at, now being the time on
// the form's clock: math.MinInt64 for the whole table, since ids may be
// zero or negative where the publisher writes them.
func (m *Mark) Start(now time.Time, rescan time.Duration) int64 {
	from, _ := m.Resume(now, rescan)
	return from
}

// Resume is Start, and says whether the claim resumes at the mark (true)
// or looks from the floor.
func (m *Mark) Resume(now time.Time, rescan time.Duration) (from int64, marked bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.marked || m.released || rescan <= 0 || now.Sub(m.scanned) >= rescan {
		m.marked, m.released, m.scanned = false, false, now
		if !m.read {
			return math.MinInt64, false
		}
		return m.floor, false
	}
	return m.from, true
}

// FloorDue says whether the floor is to be read before the next claim, and
// from which id: the first time and every DeepRescans Rescans from the
// table's start, else from the floor once a Rescan has passed since the
// last read and rows were taken since (at once while the floor is still
// the table's start).
func (m *Mark) FloorDue(now time.Time, rescan time.Duration) (from int64, due bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case rescan <= 0:
		return 0, false
	case !m.read || now.Sub(m.deepAt) >= DeepRescans*rescan:
		return math.MinInt64, true
	case m.takenSinceRead && (m.floor == math.MinInt64 || now.Sub(m.readAt) >= rescan):
		// With no floor yet (the table was empty at the last read and
		// nothing had been taken), the first rows taken give it one.
		return m.floor, true
	}
	return 0, false
}

// SetFloor records a floor read at now that looked from the id from: least
// is the least id found at or above it, invalid when there was none.
func (m *Mark) SetFloor(now time.Time, from int64, least sql.NullInt64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case least.Valid:
		m.floor = least.Int64
	case m.hiSet && m.hi < math.MaxInt64:
		m.floor = max(from, m.hi+1)
	default:
		m.floor = from
	}
	if from == math.MinInt64 {
		m.deepAt = now
	}
	m.read, m.readAt, m.takenSinceRead = true, now, false
	if m.marked && m.from < m.floor {
		m.marked = false
	}
}

// Claimed records a claim's outcome: full says it found all it asked for, and
// jobs are what it took.
func (m *Mark) Claimed(full bool, jobs []*Job) {
	m.mu.Lock()
	defer m.mu.Unlock()
	least, hi := int64(math.MaxInt64), int64(math.MinInt64)
	for _, j := range jobs {
		least, hi = min(least, j.ID), max(hi, j.ID)
	}
	if len(jobs) > 0 {
		if !m.hiSet || hi > m.hi {
			m.hi = hi
		}
		m.takenSinceRead, m.hiSet = true, true
	}
	if !full || len(jobs) == 0 {
		m.marked = false
		return
	}
	m.marked, m.from = true, least
}

// Released records that the claimer gave a row it took back, available at
// once (a limit's give-back, a stop): it may lie behind the mark, where a
// claim would pass it until the next Rescan, so the next claim starts at
// the floor.
func (m *Mark) Released() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.released = true
}

// Floor is where the live rows began at the last floor read
// (math.MinInt64 before the first).
func (m *Mark) Floor() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.read {
		return math.MinInt64
	}
	return m.floor
}
