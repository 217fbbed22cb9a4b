// Package schedule runs periodic work on one instance of a service, on every
// instance, or in every worker of every instance, with no coordinator but the
// database the instances already share (SQLite or Postgres).
//
// Each instance makes a Scheduler over its pool, adds its schedules and
// starts. For every moment of a schedule, the first instance to reach it
// writes one row holding the membership it saw in the heartbeats table and
// deals the moment's shares as rows, one per run, so every run of the moment
// agrees on its share. Each instance claims the shares dealt to it under a
// lease, renews it while the handler runs and deletes the share when the
// handler returns; a share whose lease runs out (its instance died) is taken
// over by another live instance within about a heartbeat:
//
//	s, err := schedule.New(db, schedule.Config{})
//	err = s.Add("pack_orders", schedule.Every(10*time.Second), schedule.EveryWorker,
//		func(ctx context.Context, r schedule.Run) error {
//			// take the orders whose number modulo r.Workers is r.Worker
//			return packOrders(ctx, r.Workers, r.Worker)
//		})
//	err = s.Start(ctx)
//	defer s.Stop(context.Background())
//
// The tables come from migrations.ApplySchedules.
package schedule

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// Placement says where the runs of a moment happen.
type Placement int

const (
	// One runs each moment once across all instances: on the instance whose
	// insert of the moment's row wins. When that instance goes away, the
	// next moment runs on another.
	One Placement = iota + 1
	// EveryInstance runs each moment once on every instance in the moment's
	// membership.
	EveryInstance
	// EveryWorker runs each moment once per worker on every instance in the
	// moment's membership: Config.Workers runs per instance (default one per
	// core), or the schedule's own Workers option.
	EveryWorker
)

// String names the placement as logs show it.
func (p Placement) String() string {
	switch p {
	case One:
		return "one"
	case EveryInstance:
		return "every-instance"
	case EveryWorker:
		return "every-worker"
	}
	return fmt.Sprintf("Placement(%d)", int(p))
}

// Run is what one run of a moment knows. Each moment is dealt in shares,
// one per run: Worker and Workers name a share, and a run keeps the items
// whose number modulo Workers is Worker (see Owns), so the runs of a moment
// cover every item exactly once. A share is dealt to one instance of the
// moment's membership; when that instance dies before its share is done,
// another live instance takes the share over and runs it with the same
// Worker, Workers, Instance, Runner and FiredAt (InstanceName then differs
// from DealtTo).
type Run struct {
	// Schedule is the schedule's name.
	Schedule string
	// FiredAt is the moment, computed from the spec: identical in every run
	// of the moment on every instance, never read from a clock at fire time.
	// It is in the cron's zone for Cron, in UTC for Every.
	FiredAt time.Time
	// Worker is this share's index from zero among all shares of the moment
	// on every instance; Workers is their count. With One, 0 and 1.
	Worker, Workers int
	// Instance is the index from zero, in the moment's membership (ordered
	// by instance name), of the instance the share was dealt to (DealtTo);
	// Instances is the membership's size.
	Instance, Instances int
	// Runner is the share's index from zero among the shares dealt to its
	// instance; Runners is their count (1 unless EveryWorker).
	Runner, Runners int
	// InstanceName is the name of the instance running this share: this
	// one (Config.Instance).
	InstanceName string
	// DealtTo is the name of the instance the share was dealt to. It
	// differs from InstanceName when this instance took the share over
	// because its lease ran out: the instance it was dealt to died, stopped
	// or lost the database before the share was done.
	DealtTo string
}

// Owns reports whether item n belongs to this run's share: n modulo Workers
// is Worker. Negative n are shared too.
func (r Run) Owns(n int64) bool {
	if r.Workers <= 0 {
		return false
	}
	m := n % int64(r.Workers)
	if m < 0 {
		m += int64(r.Workers)
	}
	return m == int64(r.Worker)
}

// Handler runs one share of a moment. Its context is cancelled when Stop's
// context ends while the handler is still busy, and when the share's lease
// is lost (context.Cause is then ErrShareLost): another instance may run
// the share now. A returned error or a panic is logged with the schedule,
// the moment and the share, and the share counts as run; later moments still
// run.
type Handler func(ctx context.Context, r Run) error

// Option adjusts one schedule at Add.
type Option func(*entry) error

// SkipWhileBusy skips a moment on this instance while a run of the previous
// moment on this instance is still busy: the moment's shares dealt to it are
// dropped, not taken over by others, and it takes over no share of another
// instance meanwhile. Default: the next moment runs anyway, beside the busy
// one (guard shared items with locks). With One, an instance that skips does
// not compete for the moment, so another instance may run it.
func SkipWhileBusy() Option {
	return func(e *entry) error { e.skipBusy = true; return nil }
}

// Workers sets how many runs an EveryWorker schedule has on this instance
// per moment, overriding Config.Workers. n must be at least 1; Add refuses
// it on the other placements, which have one run a moment per instance or in
// all.
func Workers(n int) Option {
	return func(e *entry) error {
		switch {
		case n < 1:
			return fmt.Errorf("Workers(%d): must be at least 1", n)
		case e.placement == One:
			return fmt.Errorf("Workers(%d) is for EveryWorker schedules; a One schedule has one run a moment", n)
		case e.placement == EveryInstance:
			return fmt.Errorf("Workers(%d) is for EveryWorker schedules; an EveryInstance schedule has one run per instance", n)
		}
		e.workers = n
		return nil
	}
}

// Defaults of Config.
const (
	// DefaultHeartbeat is how often an instance renews its heartbeats when
	// Config.Heartbeat is zero.
	DefaultHeartbeat = 5 * time.Second
	// DefaultHeartbeatTTL is the lifetime of a heartbeat when both
	// Config.Heartbeat and Config.HeartbeatTTL are zero: four heartbeats.
	DefaultHeartbeatTTL = 4 * DefaultHeartbeat
	// MomentRetention is how many HeartbeatTTLs a moment's row is kept
	// after it fired. An instance reaching a moment more than a
	// HeartbeatTTL late skips it, so it never needs a pruned row.
	MomentRetention = 10
)

// Config sets up a Scheduler. The zero value is usable: every field has a
// default.
type Config struct {
	// Instance names this instance in the heartbeats table; it must be
	// unique among the instances sharing the database: Start fails with
	// ErrDuplicateInstance when another live scheduler holds it, and waits
	// for the hold of one that died to expire (see Start). Default: host
	// name, process id and a random suffix.
	Instance string
	// Workers is how many runs an EveryWorker schedule has per moment on
	// this instance. Zero means runtime.NumCPU(); negative is refused.
	Workers int
	// Clock tells the time and paces heartbeats and moments. Nil means
	// clock.Host. With clock.Database, heartbeat expiry is compared with
	// the database's now().
	Clock clock.Clock
	// Heartbeat is how often this instance renews its heartbeats. It is
	// also a share's lease: a share whose runner died is taken over by
	// another instance between one and one and a third Heartbeats after its
	// last renewal (running shares are renewed, and orphans looked for,
	// every third of a Heartbeat). Zero means DefaultHeartbeat (5s);
	// negative is refused.
	Heartbeat time.Duration
	// HeartbeatTTL is how long a heartbeat lasts: an instance that dies
	// leaves the membership this long after its last heartbeat. Zero means
	// four Heartbeats (20s by default); it must exceed Heartbeat.
	HeartbeatTTL time.Duration
	// Logger receives handler errors and panics (Error), skipped moments
	// (Warn, or Info for SkipWhileBusy) and database errors. Nil means
	// slog.Default().
	Logger *slog.Logger
}

// ErrShareLost is the cause of a handler's cancelled context when its
// share's lease could not be renewed in time (the database was unreachable
// for a lease) or was taken over: another instance may run the share now.
var ErrShareLost = errors.New("schedule: the share's lease was lost; another instance may run it")

// ErrConfig marks a configuration or schedule refused by New or Add.
var ErrConfig = errors.New("schedule: invalid configuration")

// Scheduler runs the schedules of one instance. Make it with New, add
// schedules with Add, then Start it; Stop it when the instance shuts down so
// it leaves the membership at once.
type Scheduler struct {
	db      *sql.DB
	d       *dialect.Dialect
	times   dialect.Times
	sql     dialect.ScheduleSQL
	clk     clock.Clock
	log     *slog.Logger
	name    string
	workers int
	beat    time.Duration
	ttl     time.Duration

	mu      sync.Mutex
	entries []*entry
	byName  map[string]*entry
	state   int // 0 new, 1 started, 2 stopped

	token string        // this scheduler's hold on its instance name
	lease time.Duration // a share's lease: Heartbeat

	stopLoops context.CancelFunc // ends the heartbeat, sweep and moment loops
	stopRuns  context.CancelFunc // ends the handlers' contexts
	stopRenew context.CancelFunc // ends the renewal of held shares
	runsCtx   context.Context
	loops     sync.WaitGroup
	runs      sync.WaitGroup
	renewDone chan struct{}
	crashed   atomic.Bool // tests: runs that end leave their shares as they are
	heldMu    sync.Mutex
	held      map[shareKey]*heldShare
}

type entry struct {
	name      string
	spec      Spec
	moments   moments
	placement Placement
	handler   Handler
	skipBusy  bool
	workers   int
	loc       *time.Location // FiredAt's zone
	running   atomic.Int64   // runs in flight on this instance
}

// runners is how many runs this instance has per moment of e.
func (e *entry) runners() int {
	if e.placement == EveryWorker {
		return e.workers
	}
	return 1
}

// New makes a Scheduler for one instance over db (a SQLite pool from
// modernc.org/sqlite or a Postgres pool from pgx's stdlib). It checks cfg and
// fills in its defaults; it touches no table until Start.
func New(db *sql.DB, cfg Config) (*Scheduler, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: nil *sql.DB", ErrConfig)
	}
	d, err := dialect.Detect(db)
	if err != nil {
		return nil, fmt.Errorf("schedule: %w", err)
	}
	s := &Scheduler{
		db:      db,
		d:       d,
		clk:     clock.OrHost(cfg.Clock),
		log:     cfg.Logger,
		name:    cfg.Instance,
		workers: cfg.Workers,
		beat:    cfg.Heartbeat,
		ttl:     cfg.HeartbeatTTL,
		byName:  map[string]*entry{},
		token:   randomToken(),
		held:    map[shareKey]*heldShare{},
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.name == "" {
		s.name = defaultInstance()
	}
	switch {
	case s.workers < 0:
		return nil, fmt.Errorf("%w: Workers is %d; use 0 for one per core, or at least 1", ErrConfig, s.workers)
	case s.workers == 0:
		s.workers = runtime.NumCPU()
	}
	switch {
	case s.beat < 0:
		return nil, fmt.Errorf("%w: Heartbeat is %v; use 0 for the default %v, or a positive interval", ErrConfig, s.beat, DefaultHeartbeat)
	case s.beat == 0:
		s.beat = DefaultHeartbeat
	}
	if s.ttl == 0 {
		s.ttl = 4 * s.beat
	}
	s.lease = s.beat
	if s.ttl <= s.beat {
		return nil, fmt.Errorf("%w: HeartbeatTTL %v must exceed Heartbeat %v, or a live instance would drop out between its heartbeats", ErrConfig, s.ttl, s.beat)
	}
	enc := dialect.EncodingFor(d.Kind, "TEXT")
	s.times = dialect.Times{Kind: d.Kind, Encoding: enc, InDatabase: clock.InDatabase(s.clk)}
	s.sql = d.Schedule(s.times)
	return s, nil
}

// Name returns this instance's name in the heartbeats table.
func (s *Scheduler) Name() string { return s.name }

// Add registers a schedule: its name (unique on this Scheduler, and the
// same on every instance that shares it), when it fires, where it runs and
// what it runs. Every instance that should take part in a schedule adds it
// with the same name, spec and placement. Add is refused after Start.
func (s *Scheduler) Add(name string, spec Spec, placement Placement, handler Handler, opts ...Option) error {
	if name == "" {
		return fmt.Errorf("%w: schedule name is empty", ErrConfig)
	}
	if len(name) > 200 {
		return fmt.Errorf("%w: schedule name %.40q... is longer than 200 bytes", ErrConfig, name)
	}
	m, err := spec.compile(s.clk.Now())
	if err != nil {
		return fmt.Errorf("%w: schedule %q: %w", ErrConfig, name, err)
	}
	switch placement {
	case One, EveryInstance, EveryWorker:
	default:
		return fmt.Errorf("%w: schedule %q: unknown placement %v; use One, EveryInstance or EveryWorker", ErrConfig, name, placement)
	}
	if handler == nil {
		return fmt.Errorf("%w: schedule %q: nil handler", ErrConfig, name)
	}
	e := &entry{name: name, spec: spec, moments: m, placement: placement, handler: handler, workers: s.workers, loc: m.zone()}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(e); err != nil {
			return fmt.Errorf("%w: schedule %q: %w", ErrConfig, name, err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != 0 {
		return fmt.Errorf("%w: schedule %q: Add after Start; add every schedule before the Scheduler starts", ErrConfig, name)
	}
	if _, dup := s.byName[name]; dup {
		return fmt.Errorf("%w: schedule %q is already added", ErrConfig, name)
	}
	s.byName[name] = e
	s.entries = append(s.entries, e)
	return nil
}

// randomToken is 16 random hex digits: a scheduler's hold on its name, and
// each claim of shares.
func randomToken() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func defaultInstance() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "host"
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// ErrDuplicateInstance marks a Start refused because another live
// scheduler already runs under the same Config.Instance.
var ErrDuplicateInstance = errors.New("schedule: instance name already in use")
