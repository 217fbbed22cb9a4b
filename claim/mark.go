package claim

import (
	"math"
	"sync"
	"time"
)

// Mark is where a form's next claim starts walking the table's primary key.
//
// On Postgres a claim that walks the key from its start steps over the
// dead index entries of every row acked since the last vacuum: on a 200k
// drain (lease, 2x100) that walk was 45% of the machine's CPU (perf:
// ExecSetParamPlan -> _bt_first -> _bt_getbuf). So while claims find what
// they ask for, the next one starts at the least id the last one took; a
// claim that comes back short, or Rescan since the last walk from the
// start, walks from the start again. A row behind the mark that becomes
// available again (a lease run out, a retry come due, a delayed publish, a
// rolled-back hold) waits one Rescan (the poll interval) at most.
type Mark struct {
	mu      sync.Mutex
	marked  bool  // the last claim was full: the next starts at from
	from    int64 // the least id the last full claim took
	scanned time.Time
}

// Start returns the least id the next claim looks at, now being the time on
// the form's clock: math.MinInt64 for the whole table, since ids may be
// zero or negative where the publisher writes them.
func (m *Mark) Start(now time.Time, rescan time.Duration) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.marked || rescan <= 0 || now.Sub(m.scanned) >= rescan {
		m.marked, m.scanned = false, now
		return math.MinInt64
	}
	return m.from
}

// Took records a claim's outcome: full says it found all it asked for, and
// jobs are what it took.
func (m *Mark) Took(full bool, jobs []*Job) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !full || len(jobs) == 0 {
		m.marked = false
		return
	}
	least := jobs[0].ID
	for _, j := range jobs[1:] {
		least = min(least, j.ID)
	}
	m.marked, m.from = true, least
}
