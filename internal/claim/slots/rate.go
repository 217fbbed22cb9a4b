package slots

import (
	"context"
	"database/sql"
	"sync"
	"time"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/internal/claim/contract"
)

// A rate (inbox.Rate) is a limit whose slot is taken at a handling's
// start and lasts Limit.Per from then, settled or not: a sliding window log
// of n entries per key value, which the slot table's primary key caps. The
// claim before each sweep frees the expired slots (so the claim's count is
// of the slots live), and a claim that came back short (so its subscription
// may wait) sets a timer to the next expiry among the key values whose
// slots are all held: their next row is claimed when its window allows,
// not a poll later.

// rate says the limit is a rate.
func (l *Limiter) rate() bool { return l.cfg.Limit.Per > 0 }

// nextWake is a rate's one timer to its next expiry.
type nextWake struct {
	mu    sync.Mutex
	at    time.Time
	timer clock.Timer // nil when none is set
	gen   int         // counts the timers set, so a fired one knows it is current
	// reading: a read of the next expiry is under way; again: a claim came
	// back short since it began, so it reads once more.
	reading, again bool
	stopped        bool           // the subscription stopped: no more reads or timers
	reads          sync.WaitGroup // the read under way
}

// AfterClaim is called after a claim of max rows started claimed and gave
// back gaveBack (Take): where a rate's claim came back short, it reads the
// next expiry among the key values the claim passed over and wakes the
// table's subscriptions (Freed) then. It reads on a goroutine of its own
// (one at a time, again if a claim came back short meanwhile), so the rows
// claimed start without waiting for it. Rows given back wake them at once
// too: their key's slots were all held when the claim asked, but the one
// that freed it may have been swept by another claimer since, whose claim
// did not see the rows (held by this one's) and set no timer for them. So
// does a take of a key value's last slot: the claim statement took no more
// rows of that value than it had slots left (dialect rateCap), and may
// have left rows of other values unread behind them. Nothing for a limit:
// its frees wake them.
func (l *Limiter) AfterClaim(ctx context.Context, claimed, gaveBack, max int) {
	filled := l.filled.Swap(false)
	if !l.rate() || claimed >= max {
		return
	}
	if (gaveBack > 0 || filled) && l.cfg.Freed != nil {
		l.cfg.Freed()
	}
	w := &l.next
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	if w.reading {
		w.again = true
		return
	}
	w.reading = true
	w.reads.Add(1)
	go l.readNext(context.WithoutCancel(ctx))
}

// readNext reads the next expiry until no claim asked again meanwhile.
func (l *Limiter) readNext(ctx context.Context) {
	w := &l.next
	defer w.reads.Done()
	for {
		l.readNextOnce(ctx)
		w.mu.Lock()
		again := w.again
		w.again, w.reading = false, again
		w.mu.Unlock()
		if !again {
			return
		}
	}
}

// readNextOnce reads the next expiry and sets the timer to it.
func (l *Limiter) readNextOnce(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, contract.SettleTimeout)
	defer cancel()
	q := l.cfg.SQL.NextExpiry(l.cfg.Limit.Name, l.cfg.Limit.Max)
	var at sql.NullInt64
	if err := l.cfg.DB.QueryRowContext(ctx, q.SQL, q.Args...).Scan(&at); err != nil {
		if ctx.Err() == nil {
			l.cfg.Log.Warn("inbox: could not read when a rate's window next allows a start; its rows wait for a poll", "limit", l.cfg.Limit.Name, "table", l.cfg.Table, "err", err)
		}
		return
	}
	if at.Valid {
		l.wakeAt(time.UnixMicro(at.Int64))
	}
}

// wakeAt calls Freed at at, unless a timer is set for then or before.
func (l *Limiter) wakeAt(at time.Time) {
	w := &l.next
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped || w.timer != nil && !w.at.After(at) {
		return
	}
	if w.timer != nil {
		w.timer.Stop()
	}
	w.at = at
	w.gen++
	gen := w.gen
	w.timer = clock.AfterFunc(l.cfg.Clock, at.Sub(l.cfg.Clock.Now()), func() {
		w.mu.Lock()
		if w.gen == gen {
			w.timer = nil
		}
		w.mu.Unlock()
		if l.cfg.Freed != nil {
			l.cfg.Freed()
		}
	})
}

// Stop stops a rate's timer and waits for a read of the next expiry under
// way: the subscription's Run is ending, and its claims have stopped.
func (l *Limiter) Stop() {
	w := &l.next
	w.mu.Lock()
	w.stopped = true
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
	w.mu.Unlock()
	w.reads.Wait()
	w.mu.Lock()
	w.stopped = false // a Run that follows sets them again
	w.mu.Unlock()
}
