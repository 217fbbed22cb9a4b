// Package engine moves a claimed row through its life in the process. The
// claim loop (loop.go) asks the form for rows for free workers; workers
// (worker.go) run the handler under a watch (watch.go) that extends a
// lease, ends the handler's context at its timeout and tells it when its
// row's lease or hold is lost; settlement (settle.go) acks, retries, parks
// or snoozes the row and reports the outcome. Counters (counters.go) and
// the idle state (idle.go) are what the roles share. Package inbox
// configures an Engine for each Subscription and hands its Run over to it;
// every call back up is a field of Callbacks. The engine imports no driver:
// it knows a form by internal/claim/contract and its Traits, and what an
// error says about the database (unreachable, a dead connection) from the
// dialect's answers in Callbacks.
package engine

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/internal/claim/contract"
	"github.com/sqlinbox/sqlinbox/internal/inboxtype"
)

// Verdict is what a handler's error asks for.
type Verdict int

// The verdicts Callbacks.ErrorVerdict gives.
const (
	Retry      Verdict = iota // after the backoff
	RetryAfter                // after the delay ErrorVerdict gives
	Park                      // now, whatever attempts are left
	Snooze                    // after the delay, giving the attempt back
)

// Callbacks are the engine's calls back up to its subscription.
type Callbacks struct {
	// Handle runs the user's handler on a job's row. A panic is the
	// engine's to catch.
	Handle func(ctx context.Context, j *contract.Job) error
	// Prepare readies a job's row just before its handler runs (it writes
	// the lease into the user's struct).
	Prepare func(j *contract.Job)
	// ErrorVerdict says what a handler's error asks for, with the delay of
	// RetryAfter and Snooze.
	ErrorVerdict func(err error) (Verdict, time.Duration)
	// Observe, when set, gets each settled handling.
	Observe func(inboxtype.Event)
	// Paused, when set, says the subscription's queue is paused now: rows
	// a claim took beyond its free workers are given back, not started.
	Paused func() bool
	// Unreachable says an error means the database could not be reached
	// (as opposed to a statement that was wrong); the dialect answers.
	Unreachable func(error) bool
	// DeadConn says an error means the connection a statement ran on had
	// ended, as opposed to the database refusing new ones: a statement
	// sent again takes another connection of the pool. The dialect
	// answers.
	DeadConn func(error) bool
}

// Config is an Engine's subscription, as package inbox checked it.
type Config struct {
	Name, Table string
	Workers     int
	MaxAttempts int
	// Counts says the table has an attempts column.
	Counts bool
	// Backoff gives the delay after n failures; nil is DefaultBackoff less
	// a jitter drawn from the row's id.
	Backoff                        func(failures int) time.Duration
	Lease, Timeout, Shutdown, Poll time.Duration
	// Ordered says claims take rows in an order of the table's own (a
	// priority column), which a claim's rows do not come back in: a claim
	// takes no spare rows (see spare.go), so one worker still handles
	// rows in that order.
	Ordered bool
	// ClaimRows, when set, bounds the rows a claim takes in all, spare rows
	// included, and lets a claim take spare rows only where it is above
	// Workers: a subscription limited to n rows of one key value in work
	// (inbox.Limit) then never claims more rows than the limit lets start
	// for one key value, while a limit at or below its workers claims as
	// many rows as it has free workers and no more.
	ClaimRows int
	// Conns is the most connections the subscription's claims may hold.
	Conns int
	Clock clock.Clock
	// Log is the broker's logger: the engine names the subscription in
	// each line.
	Log *slog.Logger
	// Claimer is the subscription's form, as the form made it: the engine
	// reads its traits and optional capabilities from it.
	Claimer contract.Claimer
	// ClaimMiddleware runs around each claim, the first outermost (see
	// ClaimMiddleware).
	ClaimMiddleware []ClaimMiddleware
	// Wakes delivers a wake per publish or notification (coalesced).
	Wakes <-chan struct{}
	// Poller, when set, polls for the subscription while it is idle, with
	// the other idle subscriptions of its table (see Poller); Group is the
	// group it asks about.
	Poller *Poller
	Group  string
	// Counters and Idle outlive a Run: the subscription keeps them.
	Counters *Counters
	Idle     *Idle
	Callbacks
}

// Engine runs one subscription.
type Engine struct {
	cfg     Config
	logOnce sync.Once
	log     *slog.Logger // cfg.Log with the subscription's name; see logger
	traits  contract.Traits
	claim   ClaimFunc // the form's Claim inside cfg.ClaimMiddleware
	stats   *Counters
	inWork  inWork
	every   time.Duration // a lease's extension period
	// outage is set while the claim loop backs off from a failure: a
	// settlement that succeeds meanwhile clears it, and the loop, told as a
	// settlement ends, claims at once (the database answers again).
	outage atomic.Bool
	// watches are the worker goroutines' (one each, made with the
	// goroutine): Cancel looks for a row's handler among them, so a job
	// pays nothing for it.
	watchMu sync.Mutex
	watches []*watch
	// running is Run's workers while Run runs (Adopt queues to them).
	running atomic.Pointer[workers]
}

// New returns the engine of cfg.
func New(cfg Config) *Engine {
	return &Engine{cfg: cfg, traits: cfg.Claimer.Traits(), claim: chainClaims(cfg.Claimer.Claim, cfg.ClaimMiddleware),
		stats: cfg.Counters, every: cfg.Lease * 2 / 3}
}

// limit is n within the most rows a claim of the form may ask for.
func (e *Engine) limit(n int) int {
	if e.traits.ClaimLimit > 0 {
		return min(n, e.traits.ClaimLimit)
	}
	return n
}

// logger is cfg.Log with the subscription's name, made at the first line
// logged: a handler's clone in every subscription was 0.3 kB of each idle
// one's heap, and a claim loop rarely logs.
func (e *Engine) logger() *slog.Logger {
	e.logOnce.Do(func() { e.log = e.cfg.Log.With("subscription", e.cfg.Name) })
	return e.log
}

// Run claims and handles rows until ctx is done; then it claims no more,
// gives back rows claimed but not started, and lets running handlers finish
// within the shutdown timeout.
func (e *Engine) Run(ctx context.Context) {
	w := newWorkers(e, ctx)
	e.running.Store(w)
	defer e.running.Store(nil)
	l := newLoop(e, w, ctx)
	l.run(ctx)
	w.shutdown()
}

// DefaultBackoff is one second doubled per failure, capped at max.
func DefaultBackoff(failures int, max time.Duration) time.Duration {
	if failures < 1 {
		failures = 1
	}
	if failures > 20 {
		return max
	}
	return min(time.Second<<(failures-1), max)
}

// jittered is DefaultBackoff less up to a quarter, drawn from the row's id
// and the attempt: rows that failed together spread over the last quarter
// of the backoff instead of coming back at one instant, and a test on a
// fake clock sees the same delays on every run. Never more than
// DefaultBackoff, so a clock moved by that passes the retry.
func jittered(id int64, failures int, max time.Duration) time.Duration {
	d := DefaultBackoff(failures, max)
	x := uint64(id)*0x9e3779b97f4a7c15 + uint64(failures)
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return d - time.Duration(x%1024)*(d/4)/1024
}

// inWork keeps one process from running two handlers of one id. Every
// handler in work is recorded by its id; a new handling of an id still in
// work (its row was claimed again) first tells the old handler its hold is
// lost, since a row claimed again proves it (the lock or the lease is
// someone else's now), then waits for it to return. The worker's watch
// learns of a lost hold by itself too, but later: on MySQL a killed
// connection is seen at the next ping, up to a second, and the server
// frees its locks at once. A record and its removal cost a mutex and a map
// operation a job.
type inWork struct {
	mu sync.Mutex
	m  map[int64]*watch // the watch of the worker running each id
}

// enter records that the worker of watch w is about to run the handler of
// id, once no other handler of id runs: one that does is told its hold is
// lost, and awaited.
func (g *inWork) enter(id int64, w *watch) {
	g.mu.Lock()
	for {
		cur := g.m[id]
		if cur == nil {
			if g.m == nil {
				g.m = map[int64]*watch{}
			}
			g.m[id] = w
			g.mu.Unlock()
			return
		}
		if cur.left == nil {
			cur.left = make(chan struct{})
		}
		left := cur.left
		g.mu.Unlock()
		cur.claimedAgain(id)
		<-left
		g.mu.Lock()
	}
}

// leave ends what enter recorded, once the handler of id returned.
func (g *inWork) leave(id int64, w *watch) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m[id] == w {
		delete(g.m, id)
		if w.left != nil {
			close(w.left)
			w.left = nil
		}
	}
}

// errShutdown is the cause of handlers' contexts at the shutdown timeout.
func (e *Engine) errShutdown() error {
	return fmt.Errorf("inbox: subscription %q: shutdown timeout %v passed", e.cfg.Name, e.cfg.Shutdown)
}
