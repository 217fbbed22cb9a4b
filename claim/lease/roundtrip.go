package lease

import (
	"context"
	"database/sql"
	"sync"
	"sync/atomic"
	"time"
)

// probeEvery is how often a claimer measures its database's round trip
// while it claims.
const probeEvery = time.Second

// probeTimeout bounds one measure.
const probeTimeout = 5 * time.Second

// roundTrip measures the database's round trip apart from the work of a
// claim (engine.RoundTripper): a claim's own time also grows with the rows
// it takes and the server's load, and on loopback under load a claim of
// 1000 rows took as long as one across 5 ms each way. It pings on a pool
// connection beside the claim that started it (which waits for it before
// it returns, so no measure outlives its claim), at most once every
// probeEvery, and keeps the least of its last few pings: a ping that met
// a busy scheduler reads long.
type roundTrip struct {
	mu      sync.Mutex
	running bool
	last    time.Time // when the last measure started
	recent  [4]time.Duration
	n       int // measures taken
	least   atomic.Int64
}

// maybe starts a measure on db within ctx unless one ran within
// probeEvery, and returns a channel closed once it ends (nil when none
// started). The measure runs on its own goroutine, within probeTimeout.
func (r *roundTrip) maybe(ctx context.Context, db *sql.DB) <-chan struct{} {
	now := time.Now()
	r.mu.Lock()
	if r.running || now.Sub(r.last) < probeEvery {
		r.mu.Unlock()
		return nil
	}
	r.running, r.last = true, now
	r.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.measure(ctx, db)
	}()
	return done
}

func (r *roundTrip) measure(ctx context.Context, db *sql.DB) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var took time.Duration
	// The connection is taken first: a ping that dialed would read the
	// dial's round trips too.
	conn, err := db.Conn(ctx)
	if err == nil {
		start := time.Now()
		err = conn.PingContext(ctx)
		took = time.Since(start)
		conn.Close()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.running = false
	if err != nil {
		return
	}
	r.recent[r.n%len(r.recent)] = took
	r.n++
	least := took
	for _, d := range r.recent[:min(r.n, len(r.recent))] {
		least = min(least, d)
	}
	r.least.Store(int64(least))
}

// RoundTrip is the least of the last measures; zero before the first.
func (r *roundTrip) RoundTrip() time.Duration { return time.Duration(r.least.Load()) }
