package inbox

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/claim"
	"github.com/sqlinbox/sqlinbox/internal/claim/contract"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/internal/engine"
	"github.com/sqlinbox/sqlinbox/notify"
)

// RegistryOption configures a service's record in the registry (see
// Service.Register). A value out of its bound makes Register fail with an
// error wrapping ErrInvalid.
type RegistryOption func(*registryConfig) error

type registryConfig struct {
	heartbeat, keep, cancelPoll time.Duration
}

// RegistryHeartbeat is how often the instance beats: one statement, which
// also reads the paused queues, so a pause is seen within it (at once with
// ListenNotify). Default: the broker's poll interval, and at least
// minHeartbeat (10ms). Bound: at least 10ms.
func RegistryHeartbeat(d time.Duration) RegistryOption {
	return func(c *registryConfig) error {
		if d < minHeartbeat {
			return fmt.Errorf("inbox: %w: RegistryHeartbeat(%v); give at least 10ms, or leave the option out for the broker's poll interval", ErrInvalid, d)
		}
		c.heartbeat = d
		return nil
	}
}

// RegistryKeep is how long per-minute counts, and the rows of instances
// that died without leaving, are kept. Default: DefaultRegistryKeep (24h).
// Bound: at least 1m.
func RegistryKeep(d time.Duration) RegistryOption {
	return func(c *registryConfig) error {
		if d < time.Minute {
			return fmt.Errorf("inbox: %w: RegistryKeep(%v); give at least 1m, or leave the option out for the default %v", ErrInvalid, d, DefaultRegistryKeep)
		}
		c.keep = d
		return nil
	}
}

// minHeartbeat is RegistryHeartbeat's bound, and the floor of its default.
const minHeartbeat = 10 * time.Millisecond

// DefaultRegistryKeep is RegistryKeep's default.
const DefaultRegistryKeep = 24 * time.Hour

// An instance is shown as gone once its heartbeat is staleBeats intervals
// old, and at least staleFloor: a short heartbeat on a loaded machine (a
// GC pause, a slow statement) must not make a live instance look dead.
const (
	staleBeats = 3
	staleFloor = 5 * time.Second
)

// Register makes the service record itself in the registry tables
// (migrations.ApplyRegistry) while it runs: its instance (name, version,
// host, pid, start, heartbeat), its subscriptions (table, group, form,
// workers, the table's column roles and its limits per key) and per-minute counts of each
// queue's handlings. Run removes the record when it returns; an instance
// that dies is shown as gone once its heartbeat is three intervals old (and
// at least five seconds). A registered service also obeys pauses
// (Operator.Pause, inbox pause): a paused queue's subscriptions claim
// nothing until it is resumed, and an instance that
// starts while its queue is paused starts paused.
//
// The registry never stops a service from handling rows: with its tables
// missing, or the database refusing its statements, the service logs a
// warning, runs unregistered and unpaused, and tries again every minute.
// Call Register before Run.
func (s *Service) Register(opts ...RegistryOption) error {
	// The default keeps the option's bound: a broker polling every
	// millisecond must not write a heartbeat as often.
	cfg := registryConfig{heartbeat: max(s.broker.poll, minHeartbeat), keep: DefaultRegistryKeep, cancelPoll: DefaultCancelPoll}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return err
		}
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	s.reg = &registry{svc: s, b: s.broker, cfg: cfg, id: hex.EncodeToString(id[:]), sql: s.broker.d.Registry(),
		minutes: map[minuteKey]*minuteCount{}, log: s.broker.log.With("service", s.Name)}
	s.reg.pauses.Store(&pauseSet{})
	return nil
}

// InstanceID is the id the service records itself under in the registry,
// "" when it is not registered.
func (s *Service) InstanceID() string {
	if s.reg == nil {
		return ""
	}
	return s.reg.id
}

// registry is one instance's record in the registry tables.
type registry struct {
	svc    *Service
	b      *Broker
	cfg    registryConfig
	id     string
	sql    dialect.RegistrySQL
	log    *slog.Logger
	pauses atomic.Pointer[pauseSet]
	// claiming is held shared by each gated claim and alone while a new
	// pause is installed (see gate).
	claiming sync.RWMutex

	joined   bool
	retryAt  time.Time // when to try joining again after a failure
	failing  bool      // the last statement failed; logged once until one works
	mu       sync.Mutex
	minutes  map[minuteKey]*minuteCount
	started  time.Time
	stopLoop context.CancelFunc
	loopDone chan struct{}
	cancels  cancelWatch
}

type minuteKey struct {
	table, group string
	minute       int64 // Unix ms of the minute's start
	outcome      Outcome
}

type minuteCount struct {
	handled, totalUS, maxUS int64
}

// pauseSet is the paused queues as the last heartbeat read them.
type pauseSet map[[2]string]bool

// holds reports whether a subscription of table and group is paused: the
// whole table is, or its group.
func (p pauseSet) holds(table, group string) bool {
	return p[[2]string{table, ""}] || (group != "" && p[[2]string{table, group}])
}

func (r *registry) paused(table, group string) bool { return r.pauses.Load().holds(table, group) }

// gate claims nothing while sub's queue is paused: the claim comes back
// empty, so the subscription waits for its poll or a wake (a resume wakes
// it). Running handlers are not touched. A claim holds the registry's claim
// lock (shared) from its look at the paused set to its end, and a new pause
// is installed under the lock held alone: once Paused reports a pause, no
// claim that looked before it is still running, and a row written from
// then on is not claimed.
func (r *registry) gate(sub *Subscription) engine.ClaimMiddleware {
	return func(ctx context.Context, max int, next engine.ClaimFunc) ([]*claim.Job, error) {
		r.claiming.RLock()
		defer r.claiming.RUnlock()
		if r.paused(sub.table, sub.group) {
			return nil, nil
		}
		return next(ctx, max)
	}
}

// start joins the registry and reads the paused queues before any
// subscription claims, and starts the heartbeat. The subscriptions' pause
// gates and per-minute counts are in their decoration (see
// Service.decorate).
func (r *registry) start(ctx context.Context) {
	r.started = r.b.clock.Now()
	r.join(ctx)
	wake := r.b.hub.Subscribe(dialect.PauseChannel, "")
	if r.b.listener != nil {
		r.b.listener.Listen(dialect.PauseChannel)
	}
	loopCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r.stopLoop, r.loopDone = cancel, make(chan struct{})
	go r.loop(loopCtx, wake)
	r.cancels.start(loopCtx, r)
}

// loop beats every interval, and at once when a pause or a resume is
// announced.
func (r *registry) loop(ctx context.Context, wake *notify.Waiter) {
	defer close(r.loopDone)
	defer wake.Close()
	t := r.b.clock.NewTimer(r.cfg.heartbeat)
	defer func() { t.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			t = r.b.clock.NewTimer(r.cfg.heartbeat)
		case <-wake.C():
		}
		r.beat(ctx)
	}
}

// join inserts the instance and its subscriptions, then beats once to read
// the paused queues.
func (r *registry) join(ctx context.Context) {
	now := r.b.clock.Now()
	if now.Before(r.retryAt) {
		return
	}
	err := r.b.write(ctx, true, func(ex execer) error {
		// Instances dead for longer than Keep are forgotten here and at each
		// write of the minutes, so an idle registry forgets them too.
		host, _ := os.Hostname()
		calls := []dialect.Call{
			r.sql.Forget.Call(now.Add(-r.cfg.keep)),
			r.sql.ForgetSubs.Call(),
			r.sql.LeaveSubs.Call(r.id),
			r.sql.Leave.Call(r.id),
			r.sql.Join.Call(r.id, r.svc.Name, r.svc.Version, host, os.Getpid(), r.started, now, r.cfg.heartbeat, r.b.pickup.Fallback),
		}
		for i, sub := range r.svc.subs {
			roles, _ := json.Marshal(sub.roles())
			limits := ""
			if specs := sub.limitSpecs(); specs != nil {
				b, _ := json.Marshal(specs)
				limits = string(b)
			}
			calls = append(calls, r.sql.JoinSub.Call(r.id, i, sub.cfg.name, sub.table, sub.group, sub.cfg.form.Name(),
				sub.cfg.workers, sub.cfg.lease, string(roles), limits))
		}
		return execAll(ctx, ex, calls...)
	})
	if err != nil {
		r.retryAt = now.Add(time.Minute)
		r.log.Warn("inbox: could not join the registry; the service runs unregistered and unpaused, and tries again in a minute (did migrations.ApplyRegistry run?)", "err", err)
		return
	}
	r.joined = true
	r.beat(ctx)
}

// beat moves the heartbeat, reads the paused queues, and writes the minutes
// that have ended.
func (r *registry) beat(ctx context.Context) {
	if !r.joined {
		r.join(ctx)
		return
	}
	now := r.b.clock.Now()
	var pausedJSON string
	var found bool
	err := r.b.write(ctx, false, func(ex execer) error {
		q := r.sql.Beat.Call(now, r.id)
		if then := r.sql.Beat.Then(); then.SQL != "" {
			// MySQL: the update, then the read (see dialect.BeatSQL).
			res, err := ex.ExecContext(ctx, q.SQL, q.Args...)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil || n == 0 {
				return err
			}
			found = true
			return ex.QueryRowContext(ctx, then.SQL, then.Args...).Scan(&pausedJSON)
		}
		err := ex.QueryRowContext(ctx, q.SQL, q.Args...).Scan(&pausedJSON)
		if err == nil {
			found = true
		}
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		return err
	})
	if err != nil {
		if ctx.Err() != nil {
			return // stopping
		}
		if !r.failing {
			r.log.Warn("inbox: registry heartbeat failed; trying again at the next", "err", err)
			r.failing = true
		}
		return
	}
	if r.failing {
		r.log.Info("inbox: registry heartbeat works again")
		r.failing = false
	}
	if !found {
		// Our row was forgotten (this process stood still longer than the
		// registry keeps dead instances): join again.
		r.joined = false
		r.join(ctx)
		return
	}
	r.setPaused(pausedJSON)
	r.flush(ctx, now, false)
}

// setPaused installs the paused set a beat read and wakes the subscriptions
// of queues resumed since the last.
func (r *registry) setPaused(text string) {
	var pairs [][2]string
	if err := json.Unmarshal([]byte(text), &pairs); err != nil {
		r.log.Warn("inbox: registry: unreadable paused list", "err", err)
		return
	}
	next := pauseSet{}
	for _, p := range pairs {
		next[p] = true
	}
	prev := *r.pauses.Load()
	added := false
	for k := range next {
		added = added || !prev[k]
	}
	if added {
		r.claiming.Lock() // the claims that looked before the pause end first
		r.pauses.Store(&next)
		r.claiming.Unlock()
	} else {
		r.pauses.Store(&next)
	}
	for k := range prev {
		if !next[k] {
			r.b.hub.Wake(k[0], k[1])
		}
	}
}

// record counts one settled handling in its queue's minute.
func (r *registry) record(sub *Subscription, e Event) {
	switch e.Outcome {
	case Released:
		return
	case Canceled:
		r.cancels.done(sub.table, e.ID)
	}
	us := e.End.Sub(e.Start).Microseconds()
	k := minuteKey{table: sub.table, group: sub.group, minute: e.End.Truncate(time.Minute).UnixMilli(), outcome: e.Outcome}
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.minutes[k]
	if c == nil {
		c = &minuteCount{}
		r.minutes[k] = c
	}
	c.handled++
	c.totalUS += us
	c.maxUS = max(c.maxUS, us)
}

// flush writes the minutes that ended before now (all of them when all),
// and prunes minutes and dead instances older than Keep.
func (r *registry) flush(ctx context.Context, now time.Time, all bool) {
	cur := now.Truncate(time.Minute).UnixMilli()
	r.mu.Lock()
	done := map[minuteKey]*minuteCount{}
	for k, c := range r.minutes {
		if all || k.minute < cur {
			done[k] = c
			delete(r.minutes, k)
		}
	}
	r.mu.Unlock()
	if len(done) == 0 {
		return
	}
	err := r.b.write(ctx, true, func(ex execer) error {
		calls := make([]dialect.Call, 0, len(done)+3)
		for k, c := range done {
			calls = append(calls, r.sql.AddMinute.Call(k.table, k.group, k.minute, string(k.outcome), c.handled, c.totalUS, c.maxUS))
		}
		old := now.Add(-r.cfg.keep)
		calls = append(calls, r.sql.Prune.Call(old), r.sql.Forget.Call(old), r.sql.ForgetSubs.Call())
		return execAll(ctx, ex, calls...)
	})
	if err != nil {
		r.log.Warn("inbox: registry: could not write the per-minute counts; they are dropped", "err", err)
	}
}

// stop ends the heartbeat, writes every count and removes the instance.
func (r *registry) stop() {
	r.stopLoop()
	<-r.loopDone
	<-r.cancels.stopped
	if !r.joined {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), contract.SettleTimeout)
	defer cancel()
	r.flush(ctx, r.b.clock.Now(), true)
	// Instances that stop together may deadlock on MariaDB/MySQL (their
	// deletes lock the gaps of the subscriptions' key): a transaction
	// rolled back for it wrote nothing and is sent again.
	var err error
	for try := 1; ; try++ {
		err = r.b.write(ctx, true, func(ex execer) error {
			return execAll(ctx, ex, r.sql.LeaveSubs.Call(r.id), r.sql.Leave.Call(r.id))
		})
		if err == nil || try == 3 || !r.b.d.Conflict(err) {
			break
		}
	}
	if err != nil {
		r.log.Warn("inbox: could not leave the registry; the instance is shown as gone once its heartbeat is stale", "err", err)
	}
}

// roles maps each role of the subscription's table to its column.
func (s *Subscription) roles() map[Role]string {
	out := map[Role]string{}
	for r, f := range s.shape.byRole {
		out[r] = f.column
	}
	return out
}

// execer runs statements on a pool or in a transaction.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// execAll runs the statements in order and stops at the first failure.
func execAll(ctx context.Context, ex execer, calls ...dialect.Call) error {
	for _, c := range calls {
		if _, err := ex.ExecContext(ctx, c.SQL, c.Args...); err != nil {
			return err
		}
	}
	return nil
}

// write runs f in the broker's turn to write (SQLite), in a transaction
// when tx, else straight on the pool (one statement, one round trip).
func (b *Broker) write(ctx context.Context, tx bool, f func(execer) error) error {
	if err := b.writer.Lock(ctx); err != nil {
		return err
	}
	defer b.writer.Unlock()
	if !tx {
		return f(b.db)
	}
	t, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer t.Rollback()
	if err := f(t); err != nil {
		return err
	}
	return t.Commit()
}

// Paused reports whether the service's registry last read table (or its
// group) as paused; always false for a service that is not registered.
func (s *Service) Paused(table, group string) bool {
	return s.reg != nil && s.reg.paused(table, group)
}
