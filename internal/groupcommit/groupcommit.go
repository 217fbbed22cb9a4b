// Package groupcommit pays one commit for many requests: requests queue
// while a flush is in flight, the next flush takes every request queued
// meanwhile, and each caller learns its own result. The claim forms that
// batch their settlements (lease acks, advisory settlements) supply only
// their flush.
//
//	acks := groupcommit.New(groupcommit.Config[ack]{Flush: deleteAll, Max: 1000})
//	err := acks.Do(ctx, ack{id, fence})
package groupcommit

import (
	"context"
	"sync"
	"time"
)

// Config is what a Committer flushes and how it paces its flushes.
type Config[R any] struct {
	// Flush runs one batch and sets errs[i] to batch[i]'s failure (nil for
	// success). errs comes zeroed, as long as batch. Flush runs on the
	// committer's goroutines, up to Flushers at once (one unless set), and
	// keeps neither slice.
	// Required.
	Flush func(batch []R, errs []error)
	// Max is the most requests one flush takes. Zero means no bound.
	Max int
	// Linger is the longest the oldest queued request waits for others
	// while the caller says more are coming (see Expect), so they share a
	// flush. It paces statements, so it is host time. Zero: no wait.
	Linger time.Duration
	// Idle is how long the committer's goroutine waits for more requests
	// once it has flushed all, before it ends: a goroutine started anew
	// grows its stack through the driver again. Zero: it ends at once.
	Idle time.Duration
	// Flushers, if set, is the most flushes in flight at once, asked each
	// time a whole batch waits; unset, one. A flush beyond the first
	// starts only for a whole batch (Max requests queued while the others
	// run), so requests still share flushes as with one: it is for a flush
	// whose round trip is long, which requests outrun. Needs Max.
	Flushers func() int
	// Rest, if set, is called with the committer's lock held each time the
	// goroutine finds nothing queued after a flush (more than once in a
	// row, at times): a request queued after it is flushed by a flush that
	// begins after Rest returned. It must not block nor call the committer.
	Rest func()
}

// Committer group-commits requests of type R. Its goroutine runs only
// while requests come (see Config.Idle): a Committer nobody uses leaves
// none behind.
type Committer[R any] struct {
	cfg Config[R]

	mu       sync.Mutex
	pending  []call[R]
	first    time.Time // when the oldest pending request came
	expected int       // requests announced by Expect, not yet come
	running  bool
	flushing int           // flushes in flight
	extra    int           // goroutines beside run's that flush whole batches (see Flushers)
	wake     chan struct{} // a request came, or the awaited one was dropped
	timer    *time.Timer   // the linger's and the idle wait's, kept by run
}

// call is one queued request and where its result goes: done, or else res.
type call[R any] struct {
	r    R
	done func(error)
	res  chan error
}

// New returns a committer of cfg. It starts no goroutine until a request
// comes.
func New[R any](cfg Config[R]) *Committer[R] {
	if cfg.Flush == nil {
		panic("groupcommit: Config.Flush is nil")
	}
	return &Committer[R]{cfg: cfg, wake: make(chan struct{}, 1)}
}

// Expect says n more requests are coming: while any is expected, the
// oldest queued request lingers for them (up to Config.Linger).
func (c *Committer[R]) Expect(n int) {
	c.mu.Lock()
	c.expected += n
	c.mu.Unlock()
}

// Drop says one expected request will not come, so those queued stop
// waiting for it.
func (c *Committer[R]) Drop() {
	c.mu.Lock()
	c.expected = max(c.expected-1, 0)
	wake := c.expected == 0 && len(c.pending) > 0
	c.mu.Unlock()
	if wake {
		c.wakeRun()
	}
}

// Expected is how many requests are announced and not yet come.
func (c *Committer[R]) Expected() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.expected
}

// Queued is how many requests wait for a flush (not those in one).
func (c *Committer[R]) Queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending)
}

// Do queues r and waits for its result. When ctx ends first, Do returns
// ctx's error and r is still flushed; its result is dropped.
func (c *Committer[R]) Do(ctx context.Context, r R) error {
	res := make(chan error, 1)
	c.queue(call[R]{r: r, res: res})
	select {
	case err := <-res:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Submit queues r and returns; done gets its result, once, on the
// committer's goroutine, which it must not hold up.
func (c *Committer[R]) Submit(r R, done func(error)) {
	c.queue(call[R]{r: r, done: done})
}

func (c *Committer[R]) queue(cl call[R]) {
	c.mu.Lock()
	if len(c.pending) == 0 {
		c.first = time.Now()
	}
	c.pending = append(c.pending, cl)
	c.expected = max(c.expected-1, 0)
	// run is woken only where its wait changes: at a batch's first
	// request, when none is expected any more, and at a full batch; those
	// between join the batch without waking it (a wake a request cost a
	// timer reset and a goroutine switch each).
	wake := len(c.pending) == 1 || c.expected == 0 || c.full()
	if !c.running {
		c.running = true
		go c.run()
	} else if c.full() && c.flushing > 0 && c.cfg.Flushers != nil && c.extra+1 < c.cfg.Flushers() {
		// run's flush is in flight and a whole batch waits.
		c.extra++
		go c.runWhole()
	}
	c.mu.Unlock()
	if wake {
		c.wakeRun()
	}
}

// full says the queue holds a whole batch. The caller holds c.mu.
func (c *Committer[R]) full() bool {
	return c.cfg.Max > 0 && len(c.pending) >= c.cfg.Max
}

// wakeRun ends the run's wait, unless a wake is pending already.
func (c *Committer[R]) wakeRun() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// wait waits d or a wake, and says whether it was woken.
func (c *Committer[R]) wait(d time.Duration) (woken bool) {
	c.timer.Reset(d)
	select {
	case <-c.wake:
		woken = true
	case <-c.timer.C:
	}
	c.timer.Stop()
	return woken
}

// run flushes batches until none has been queued for Config.Idle, then
// ends.
func (c *Committer[R]) run() {
	if c.timer == nil {
		c.timer = time.NewTimer(time.Hour)
		c.timer.Stop()
	}
	var (
		batch []R
		errs  []error
		calls []call[R]
	)
	for {
		c.mu.Lock()
		c.linger()
		n := len(c.pending)
		if c.cfg.Max > 0 {
			n = min(n, c.cfg.Max)
		}
		if n == 0 {
			if c.rest() {
				continue
			}
			return
		}
		calls = c.take(calls, n)
		c.mu.Unlock()
		batch, errs = c.flush(calls, batch, errs)
	}
}

// runWhole flushes whole batches beside run while they wait, then ends.
func (c *Committer[R]) runWhole() {
	var (
		batch []R
		errs  []error
		calls []call[R]
	)
	for {
		c.mu.Lock()
		if !c.full() {
			c.extra--
			c.mu.Unlock()
			return
		}
		calls = c.take(calls, c.cfg.Max)
		c.mu.Unlock()
		batch, errs = c.flush(calls, batch, errs)
	}
}

// take moves the n oldest queued requests into calls, a flush in flight.
// The caller holds c.mu.
func (c *Committer[R]) take(calls []call[R], n int) []call[R] {
	calls = append(calls[:0], c.pending[:n]...)
	rest := copy(c.pending, c.pending[n:])
	clear(c.pending[rest:])
	c.pending = c.pending[:rest]
	c.first = time.Now() // those left have waited a flush already
	c.flushing++
	return calls
}

// flush runs one batch of calls and tells each its result; batch and errs
// are kept between flushes.
func (c *Committer[R]) flush(calls []call[R], batch []R, errs []error) ([]R, []error) {
	batch, errs = batch[:0], errs[:0]
	for _, cl := range calls {
		batch = append(batch, cl.r)
		errs = append(errs, nil)
	}
	c.cfg.Flush(batch, errs)
	c.mu.Lock()
	c.flushing--
	c.mu.Unlock()
	for i, cl := range calls {
		if cl.done != nil {
			cl.done(errs[i])
		} else {
			cl.res <- errs[i]
		}
	}
	clear(batch) // let go of what the requests hold
	clear(calls)
	return batch, errs
}

// linger waits, up to Config.Linger from the oldest queued request, while
// more are expected and the batch is not full. The caller holds c.mu; it
// is released during the wait.
func (c *Committer[R]) linger() {
	for len(c.pending) > 0 && !c.full() && c.expected > 0 {
		d := c.cfg.Linger - time.Since(c.first)
		if d <= 0 {
			return
		}
		c.mu.Unlock()
		c.wait(d)
		c.mu.Lock()
	}
}

// rest is run's turn with nothing queued: it calls Config.Rest, waits up to
// Config.Idle for a request, and says whether run goes on. The caller holds
// c.mu; rest releases it.
func (c *Committer[R]) rest() (goOn bool) {
	if c.cfg.Rest != nil {
		c.cfg.Rest()
	}
	if c.cfg.Idle > 0 {
		c.mu.Unlock()
		if c.wait(c.cfg.Idle) {
			return true
		}
		c.mu.Lock()
		if len(c.pending) > 0 {
			c.mu.Unlock()
			return true
		}
	}
	c.running = false
	c.mu.Unlock()
	return false
}
