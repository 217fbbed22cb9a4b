// Package schedule runs periodic work on one instance of a service, on every
// instance, or in every worker of every instance, with no coordinator but the
// database the instances already share (SQLite or Postgres).
//
// Each instance makes a Scheduler over its pool, adds its schedules and
// starts. For every moment of a schedule, the first instance to reach it
// writes one row holding the membership it saw in the heartbeats table; every
// instance reads that row, so every run of the moment agrees on its share:
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

// Run is what one run of a moment knows. Worker and Workers make a share:
// a run keeps the items whose number modulo Workers is Worker (see Owns),
// and the runs of a moment cover every item exactly once.
type Run struct {
	// Schedule is the schedule's name.
	Schedule string
	// FiredAt is the moment, computed from the spec: identical in every run
	// of the moment on every instance, never read from a clock at fire time.
	FiredAt time.Time
	// Worker is this run's index from zero among all runs of the moment on
	// every instance; Workers is their count. With One, 0 and 1.
	Worker, Workers int
	// Instance is this instance's index from zero in the moment's membership
	// (ordered by instance name); Instances is the membership's size.
	Instance, Instances int
	// Runner is this run's index from zero among the runs of the moment on
	// this instance; Runners is their count (1 unless EveryWorker).
	Runner, Runners int
	// InstanceName is the name of this instance (Config.Instance).
	InstanceName string
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

// Handler runs one share of a moment. Its context is cancelled when Stop
// returns: at once if Stop's context ends while the handler is still busy. A returned error or a panic is
// logged with the schedule, the moment and the share; later moments still
// run.
type Handler func(ctx context.Context, r Run) error

// Option adjusts one schedule at Add.
type Option func(*entry) error

// SkipWhileBusy skips a moment on this instance while a run of the previous
// moment on this instance is still busy. Default: the next moment runs
// anyway, beside the busy one (guard shared items with locks). With One, an
// instance that skips does not compete for the moment, so another instance
// may run it.
func SkipWhileBusy() Option {
	return func(e *entry) error { e.skipBusy = true; return nil }
}

// Workers sets how many runs an EveryWorker schedule has on this instance
// per moment, overriding Config.Workers. n must be at least 1.
func Workers(n int) Option {
	return func(e *entry) error {
		if n < 1 {
			return fmt.Errorf("Workers(%d): must be at least 1", n)
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
	// unique among the instances sharing the database. Default: host
	// name, process id and a random suffix.
	Instance string
	// Workers is how many runs an EveryWorker schedule has per moment on
	// this instance. Zero means runtime.NumCPU(); negative is refused.
	Workers int
	// Clock tells the time and paces heartbeats and moments. Nil means
	// clock.Host. With clock.Database, heartbeat expiry is compared with
	// the database's now().
	Clock clock.Clock
	// Heartbeat is how often this instance renews its heartbeats. Zero
	// means DefaultHeartbeat (5s); negative is refused.
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

	stopLoops context.CancelFunc // ends the heartbeat and moment loops
	stopRuns  context.CancelFunc // ends the handlers' contexts
	runsCtx   context.Context
	loops     sync.WaitGroup
	runs      sync.WaitGroup
}

type entry struct {
	name      string
	spec      Spec
	moments   moments
	placement Placement
	handler   Handler
	skipBusy  bool
	workers   int
	running   atomic.Int64 // runs in flight on this instance
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
	e := &entry{name: name, spec: spec, moments: m, placement: placement, handler: handler, workers: s.workers}
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

func defaultInstance() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "host"
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}
