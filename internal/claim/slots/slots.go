// Package slots keeps a subscription's limit per key value (inbox.Limit):
// after its form claims rows, each row of a limited key value takes a slot
// in the slot table (dialect.SlotSQL), and a row whose slot is taken by
// another claimer is given back unstarted, its attempt returned. The slot
// lasts as long as the row's hold (the lease form: the lease, extended with
// it; the row-lock and advisory forms: a lease of its own that a heartbeat
// extends while the process lives) and is deleted once the row is settled.
// The claim statements themselves pass over the rows of a key value whose
// slots are all taken (dialect.Table.Limit), so a saturated key costs no
// claim, no attempt and no give-back. A rate (inbox.Rate) is a limit whose
// slots last a window from their take, settled or not (rate.go).
package slots

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/internal/claim/contract"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/internal/groupcommit"
)

// Config is what a Limiter needs of its subscription.
type Config struct {
	DB     *sql.DB
	SQL    dialect.SlotSQL
	Writer *dialect.Writer // SQLite's one write turn; nil elsewhere
	Clock  clock.Clock
	Limit  dialect.Limit
	Table  string // for messages
	// HoldExpires: the form's hold is the row's lease (the lease form), so
	// a slot lasts as long as that lease and is extended with it; otherwise
	// a slot lasts TTL and a heartbeat extends it every TTL/3.
	HoldExpires bool
	TTL         time.Duration
	// Sweep is how often claims delete the expired slots of the limit (the
	// poll interval).
	Sweep time.Duration
	// Freed, when set, is called after slots were freed (on the freeing
	// goroutine; it must not block): the subscriptions of the table in this
	// process are woken.
	Freed func()
	Log   *slog.Logger
	// Conflict says a statement was rolled back for a deadlock or a lock
	// wait timeout (MariaDB/MySQL): it is sent again, a few times.
	Conflict func(error) bool
}

// conflictTries is how many times a take or a free that met a conflict is
// sent.
const conflictTries = 3

// again says whether a statement that failed with err on try is sent again.
func (l *Limiter) again(err error, try int) bool {
	return err != nil && try < conflictTries && l.cfg.Conflict != nil && l.cfg.Conflict(err)
}

// Limiter takes and frees the slots of one subscription.
type Limiter struct {
	cfg    Config
	holder string // this limiter's name in the slot table
	fence  atomic.Int64
	free   *groupcommit.Committer[dialect.SlotHeld]

	mu      sync.Mutex
	swept   time.Time
	pruned  time.Time
	held    int // slots held, for the heartbeat
	refused atomic.Int64
	freeing sync.WaitGroup // frees queued and not yet flushed
	next    nextWake       // a rate's wake at its next expiry (rate.go)
	// filled: a take since the last AfterClaim took the last slot of a
	// key value (rate.go).
	filled atomic.Bool
}

// Wait waits for the frees queued so far to be flushed: a subscription's
// Run returns once its slots are freed.
func (l *Limiter) Wait() { l.freeing.Wait() }

// New returns a limiter of cfg.
func New(cfg Config) *Limiter {
	var b [12]byte
	_, _ = rand.Read(b[:])
	l := &Limiter{cfg: cfg, holder: hex.EncodeToString(b[:])}
	l.free = groupcommit.New(groupcommit.Config[dialect.SlotHeld]{Flush: l.flushFree, Max: 300})
	return l
}

// Refused counts rows a claim took whose key value had no slot left when
// their slot was asked for (claimers racing for the last slot): they were
// given back unstarted.
func (l *Limiter) Refused() int64 { return l.refused.Load() }

// Slot is the slot a job holds: the handler can read it (its fence rises
// with every take of the same slot while the hosts' clocks agree).
type Slot struct {
	Limit string
	Key   string
	Slot  int
	Fence int64
}

// Of returns the slots the job's settler holds, the limit's before the
// rate's (the rate's settler wraps the limit's); none without.
func Of(j *contract.Job) []Slot {
	var out []Slot
	for s := j.Settler; ; {
		w, ok := s.(interface{ slot() *slotted })
		if !ok {
			break
		}
		h := w.slot()
		out = append(out, Slot{Limit: h.l.cfg.Limit.Name, Key: h.h.Key, Slot: h.h.Slot, Fence: h.h.Fence})
		s = h.Settler
	}
	slices.Reverse(out)
	return out
}

// Unwrap returns the form's own settler of a job that holds slots.
func Unwrap(s contract.Settler) contract.Settler {
	for {
		w, ok := s.(interface{ slot() *slotted })
		if !ok {
			return s
		}
		s = w.slot().Settler
	}
}

// pruneEvery is how often a limiter deletes the rows of slots free for
// long (dialect.FreeRowsAfter).
const pruneEvery = time.Minute

// BeforeClaim frees the limit's expired slots, at most once a Sweep, and
// deletes the rows of slots long free, at most once a pruneEvery.
func (l *Limiter) BeforeClaim(ctx context.Context) {
	now := l.cfg.Clock.Now()
	l.mu.Lock()
	due := now.Sub(l.swept) >= l.cfg.Sweep || l.rate()
	if due {
		l.swept = now
	}
	prune := now.Sub(l.pruned) >= pruneEvery
	if prune {
		l.pruned = now
	}
	l.mu.Unlock()
	if due {
		if err := l.exec(ctx, l.cfg.SQL.Sweep(l.cfg.Limit.Name, now)); err != nil && ctx.Err() == nil && !(l.rate() && l.again(err, 1)) {
			l.cfg.Log.Warn("inbox: could not free the expired slots of a limit; they are freed at the next claim a poll later", "limit", l.cfg.Limit.Name, "table", l.cfg.Table, "err", err)
		}
	}
	if prune {
		if err := l.exec(ctx, l.cfg.SQL.Prune(l.cfg.Limit.Name, now)); err != nil && ctx.Err() == nil {
			l.cfg.Log.Warn("inbox: could not delete the rows of a limit's slots free for long", "limit", l.cfg.Limit.Name, "table", l.cfg.Table, "err", err)
		}
	}
}

func (l *Limiter) exec(ctx context.Context, q dialect.Call) error {
	if err := l.cfg.Writer.Lock(ctx); err != nil {
		return err
	}
	defer l.cfg.Writer.Unlock()
	_, err := l.cfg.DB.ExecContext(ctx, q.SQL, q.Args...)
	return err
}

// nextFence is the fence of a take at now: its time in microseconds, above
// every fence this limiter gave before.
func (l *Limiter) nextFence(now time.Time) int64 {
	for {
		last := l.fence.Load()
		f := max(now.UnixMicro(), last+1)
		if l.fence.CompareAndSwap(last, f) {
			return f
		}
	}
}

// Take gives each limited job of jobs a slot and returns the jobs that
// start: those not limited (no key, or a row that could not be read), and
// those that took a slot, their settlers now freeing it. The others are
// given back unstarted. On a failure the limited jobs are given back and
// the others returned with the error.
func (l *Limiter) Take(ctx context.Context, jobs []*contract.Job) ([]*contract.Job, error) {
	var keyed []*contract.Job
	out := jobs[:0:0]
	for _, j := range jobs {
		if _, ok := l.keyOf(j); ok && j.Err == nil {
			keyed = append(keyed, j)
		} else {
			out = append(out, j)
		}
	}
	if len(keyed) == 0 {
		return jobs, nil
	}
	won, err := l.take(ctx, keyed)
	if err != nil {
		l.giveBack(keyed, nil)
		return out, fmt.Errorf("take the slots of limit %q on %q: %w", l.cfg.Limit.Name, l.cfg.Table, err)
	}
	var lost []*contract.Job
	for _, j := range keyed {
		if h, ok := won[j.ID]; ok {
			j.Settler = l.wrap(j.Settler, h)
			out = append(out, j)
		} else {
			lost = append(lost, j)
		}
	}
	l.refused.Add(int64(len(lost)))
	l.giveBack(lost, nil)
	return out, nil
}

// take asks for a free slot for each job and returns those taken by id.
func (l *Limiter) take(ctx context.Context, jobs []*contract.Job) (map[int64]dialect.SlotHeld, error) {
	lim := l.cfg.Limit
	seen := map[string]bool{}
	var keys []string
	for _, j := range jobs {
		if k, _ := l.keyOf(j); !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	used := map[string]map[int]bool{}
	for start := 0; start < len(keys); start += 500 {
		q := l.cfg.SQL.Occupied(lim.Name, keys[start:min(start+500, len(keys))])
		rows, err := l.cfg.DB.QueryContext(ctx, q.SQL, q.Args...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var k string
			var s int
			if err := rows.Scan(&k, &s); err != nil {
				rows.Close()
				return nil, err
			}
			if used[k] == nil {
				used[k] = map[int]bool{}
			}
			used[k][s] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	now := l.cfg.Clock.Now()
	fence := l.nextFence(now)
	var want []dialect.SlotWant
	for _, j := range jobs {
		k, _ := l.keyOf(j)
		u := used[k]
		if u == nil {
			u = map[int]bool{}
			used[k] = u
		}
		for s := 0; s < lim.Max; s++ {
			if !u[s] {
				u[s] = true
				want = append(want, dialect.SlotWant{Key: k, Slot: s, RowID: j.ID, Expires: l.expires(j, now)})
				break
			}
		}
	}
	for _, k := range keys {
		if len(used[k]) >= lim.Max {
			l.filled.Store(true)
			break
		}
	}
	won := map[int64]dialect.SlotHeld{}
	if len(want) == 0 {
		return won, nil
	}
	slotOf := make(map[int64]dialect.SlotWant, len(want))
	for _, w := range want {
		slotOf[w.RowID] = w
	}
	var taken []int64
	var err error
	for try := 1; ; try++ {
		taken, err = l.insert(ctx, fence, want)
		if !l.again(err, try) {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	for _, id := range taken {
		if w, ok := slotOf[id]; ok {
			won[id] = dialect.SlotHeld{Key: w.Key, Slot: w.Slot, Fence: fence}
		}
	}
	if len(won) > 0 {
		l.mu.Lock()
		l.held += len(won)
		l.mu.Unlock()
	}
	return won, nil
}

// keyOf is the job's key value of this limiter: a rate's key, or a
// limit's; false where it is NULL (the row is not limited by it).
func (l *Limiter) keyOf(j *contract.Job) (string, bool) {
	if l.rate() {
		return j.RateKey, j.RateKeyed
	}
	return j.Key, j.Keyed
}

// expires is when the slot of a job taken at now ends: with its lease, or
// a TTL from now.
func (l *Limiter) expires(j *contract.Job, now time.Time) time.Time {
	if l.rate() {
		return now.Add(l.cfg.Limit.Per)
	}
	if l.cfg.HoldExpires && !j.Lease.IsZero() {
		return j.Lease
	}
	return now.Add(l.cfg.TTL)
}

// insert runs Take (in chunks) and returns the row ids whose slot it took.
func (l *Limiter) insert(ctx context.Context, fence int64, want []dialect.SlotWant) ([]int64, error) {
	if err := l.cfg.Writer.Lock(ctx); err != nil {
		return nil, err
	}
	defer l.cfg.Writer.Unlock()
	var ids []int64
	for start := 0; start < len(want); start += 200 {
		q := l.cfg.SQL.Take(l.cfg.Limit.Name, l.holder, fence, want[start:min(start+200, len(want))])
		if !l.cfg.SQL.Returns() {
			if _, err := l.cfg.DB.ExecContext(ctx, q.SQL, q.Args...); err != nil {
				return nil, err
			}
			continue
		}
		rows, err := l.cfg.DB.QueryContext(ctx, q.SQL, q.Args...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return nil, err
			}
			ids = append(ids, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	if l.cfg.SQL.Returns() {
		return ids, nil
	}
	q := l.cfg.SQL.Taken(l.cfg.Limit.Name, l.holder, fence)
	rows, err := l.cfg.DB.QueryContext(ctx, q.SQL, q.Args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// giveBack releases jobs unstarted (their attempt given back), each in a
// statement of its own, under a timeout of their own: a claim's stop must
// not leave them held for a lease.
func (l *Limiter) giveBack(jobs []*contract.Job, _ error) {
	if len(jobs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), contract.SettleTimeout)
	defer cancel()
	for _, j := range jobs {
		if err := j.Release(ctx); err != nil && !errors.Is(err, contract.ErrLost) {
			l.cfg.Log.Warn("inbox: could not give back a row over its limit; it comes back when its hold ends", "table", l.cfg.Table, "id", j.ID, "err", err)
		}
	}
}

// flushFree deletes a batch of freed slots.
func (l *Limiter) flushFree(batch []dialect.SlotHeld, errs []error) {
	ctx, cancel := context.WithTimeout(context.Background(), contract.SettleTimeout)
	defer cancel()
	q := l.cfg.SQL.Free(l.cfg.Limit.Name, l.holder, l.cfg.Limit.Max, l.cfg.Clock.Now(), batch, l.cfg.HoldExpires)
	var err error
	if l.cfg.SQL.Notifies() {
		var rows *sql.Rows
		if err = l.cfg.Writer.Lock(ctx); err == nil {
			rows, err = l.cfg.DB.QueryContext(ctx, q.SQL, q.Args...)
			if err == nil {
				for rows.Next() {
				}
				err = rows.Err()
				rows.Close()
			}
			l.cfg.Writer.Unlock()
		}
	} else {
		for try := 1; ; try++ {
			err = l.exec(ctx, q)
			if !l.again(err, try) {
				break
			}
		}
	}
	if err != nil {
		// The slots stay until their expiry: then the sweep deletes them.
		l.cfg.Log.Warn("inbox: could not free the slots of settled rows; they free when their hold's time ends", "limit", l.cfg.Limit.Name, "table", l.cfg.Table, "slots", len(batch), "err", err)
		for i := range errs {
			errs[i] = err
		}
	}
	l.mu.Lock()
	l.held -= len(batch)
	l.mu.Unlock()
	if l.cfg.Freed != nil {
		l.cfg.Freed()
	}
}

// Heartbeat extends this limiter's slots every TTL/3 until ctx ends, where
// the form's hold does not expire by itself (see Config.HoldExpires). A
// holder that dies leaves its slots to end a TTL after its last beat.
func (l *Limiter) Heartbeat(ctx context.Context) {
	if l.cfg.HoldExpires || l.rate() {
		return
	}
	every := l.cfg.TTL / 3
	for {
		if clock.Sleep(ctx, l.cfg.Clock, every) != nil {
			return
		}
		l.mu.Lock()
		held := l.held
		l.mu.Unlock()
		if held <= 0 {
			continue
		}
		now := l.cfg.Clock.Now()
		if err := l.exec(ctx, l.cfg.SQL.Heartbeat(l.cfg.Limit.Name, l.holder, now.Add(l.cfg.TTL))); err != nil && ctx.Err() == nil {
			l.cfg.Log.Warn("inbox: could not extend the slots of rows in work", "limit", l.cfg.Limit.Name, "table", l.cfg.Table, "err", err)
		}
	}
}

// wrap returns the settler of a job that holds slot h: it frees the slot
// once the row is settled, and keeps the optional interfaces of s.
func (l *Limiter) wrap(s contract.Settler, h dialect.SlotHeld) contract.Settler {
	w := &slotted{Settler: s, l: l, h: h}
	w.freed.Store(l.rate()) // a rate's slot lasts its window, settled or not
	_, async := s.(contract.AsyncAcker)
	_, holder := s.(contract.Holder)
	switch {
	case async && holder:
		return &slottedAsyncHolder{slottedAsync{w}}
	case async:
		return &slottedAsync{w}
	case holder:
		return &slottedHolder{w}
	}
	return w
}

// slotted is a settler whose job holds a slot.
type slotted struct {
	contract.Settler
	l     *Limiter
	h     dialect.SlotHeld
	freed atomic.Bool
}

func (s *slotted) slot() *slotted { return s }

// release frees the slot, once, and calls then (if not nil) when the free
// is written: the free is batched with others.
func (s *slotted) release(then func()) {
	if !s.freed.CompareAndSwap(false, true) {
		if then != nil {
			then()
		}
		return
	}
	s.l.freeing.Add(1)
	s.l.free.Submit(s.h, func(error) {
		s.l.freeing.Done()
		if then != nil {
			then()
		}
	})
}

// settled frees the slot and waits until the free is written, so that the
// claim the engine sends once a settlement returns finds the slot free.
func (s *slotted) settled() {
	done := make(chan struct{})
	s.release(func() { close(done) })
	<-done
}

func (s *slotted) Ack(ctx context.Context) error {
	defer s.settled()
	return s.Settler.Ack(ctx)
}

func (s *slotted) Retry(ctx context.Context, delay time.Duration, lastError string) error {
	defer s.settled()
	return s.Settler.Retry(ctx, delay, lastError)
}

func (s *slotted) Park(ctx context.Context, lastError string) error {
	defer s.settled()
	return s.Settler.Park(ctx, lastError)
}

func (s *slotted) Snooze(ctx context.Context, delay time.Duration) error {
	defer s.settled()
	return s.Settler.Snooze(ctx, delay)
}

func (s *slotted) Release(ctx context.Context) error {
	defer s.settled()
	return s.Settler.Release(ctx)
}

// Extend extends the row's lease, then the slot's (the lease form): a slot
// another claimer took meanwhile is a hold lost.
func (s *slotted) Extend(ctx context.Context, lease time.Duration) error {
	if err := s.Settler.Extend(ctx, lease); err != nil || !s.l.cfg.HoldExpires || s.l.rate() {
		return err
	}
	q := s.l.cfg.SQL.Extend(s.l.cfg.Limit.Name, s.l.holder, s.h, s.l.cfg.Clock.Now().Add(lease))
	if err := s.l.cfg.Writer.Lock(ctx); err != nil {
		return err
	}
	res, err := s.l.cfg.DB.ExecContext(ctx, q.SQL, q.Args...)
	s.l.cfg.Writer.Unlock()
	if err != nil {
		return fmt.Errorf("extend the slot of key %q of limit %q: %w", s.h.Key, s.l.cfg.Limit.Name, err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		return fmt.Errorf("extend the slot of key %q of limit %q: %w", s.h.Key, s.l.cfg.Limit.Name, contract.ErrLost)
	}
	return nil
}

// Forget: the row was lost while its handler ran; its slot goes too.
func (s *slotted) Forget() {
	if f, ok := s.Settler.(contract.Forgetter); ok {
		f.Forget()
	}
	s.release(nil)
}

type slottedAsync struct{ *slotted }

func (s *slottedAsync) AckAsync(done func(error)) {
	s.Settler.(contract.AsyncAcker).AckAsync(func(err error) {
		s.release(func() { done(err) })
	})
}

type slottedHolder struct{ *slotted }

func (s *slottedHolder) Hold() context.Context { return s.Settler.(contract.Holder).Hold() }

type slottedAsyncHolder struct{ slottedAsync }

func (s *slottedAsyncHolder) Hold() context.Context { return s.Settler.(contract.Holder).Hold() }
