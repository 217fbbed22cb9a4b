// Package schedule runs periodic work on one instance of a service, on every
// instance, or in every worker of every instance, with no coordinator but the
// database the instances already share (SQLite or Postgres).
//
// Each instance makes a Scheduler over its pool, adds its schedules and
// starts. For every moment of a schedule, the first instance to reach it
// writes one row holding the membership it saw in the heartbeats table and
// deals the moment's shares as rows, one per run, so every run of the moment
// agrees on its share. Each instance claims the shares dealt to it under a
// lease, renews it while the handler runs and marks the share done when the
// handler returns; a share whose lease runs out (its instance died) is taken
// over by another live instance within about a heartbeat:
//
//	s, err := schedule.New(db)
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
	"github.com/sqlinbox/sqlinbox/internal/config"
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
	// moment's membership: DefaultWorkers runs per instance (default one per
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
	// It is in the cron's zone for Cron, in UTC for Every. A moment missed
	// while every instance was down and run later (CatchUp) keeps its own.
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
	// one (the Instance option of New).
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

// ErrShareLost is the cause of a handler's cancelled context when its
// share's lease could not be renewed in time (the database was unreachable
// for a lease) or was taken over: another instance may run the share now.
var ErrShareLost = errors.New("schedule: the share's lease was lost; another instance may run it")

// ErrInvalid marks an option or schedule refused by New or Add. It is the
// module's one error of refused input: inbox.ErrInvalid and
// lock.ErrInvalid are the same value.
var ErrInvalid = config.ErrInvalid

// Scheduler runs the schedules of one instance. Make it with New, add
// schedules with Add, then Start it; Stop it when the instance shuts down so
// it leaves the membership at once.
type Scheduler struct {
	db    *sql.DB
	d     *dialect.Dialect
	times dialect.Times
	sql   dialect.ScheduleSQL
	clk   clock.Clock
	// placements reads the operators' overrides (placement.go); until
	// noOverrides (Unix nanoseconds) the table is known to be missing.
	placements  dialect.PlacementSQL
	noOverrides atomic.Int64
	log         *slog.Logger
	name        string
	workers     int
	beat        time.Duration
	ttl         time.Duration

	mu      sync.Mutex
	entries []*entry
	byName  map[string]*entry
	state   int // 0 new, 1 started, 2 stopped

	token   string        // this scheduler's hold on its instance name
	started time.Time     // when Start wrote this instance's heartbeats
	lease   time.Duration // a share's lease: Heartbeat

	stopLoops context.CancelFunc // ends the heartbeat, sweep and moment loops
	stopRuns  context.CancelFunc // ends the handlers' contexts
	stopRenew context.CancelFunc // ends the renewal of held shares
	runsCtx   context.Context
	loops     sync.WaitGroup
	runs      sync.WaitGroup
	renewDone chan struct{}
	heldMu    sync.Mutex
	held      map[shareKey]*heldShare
}

type entry struct {
	name      string
	spec      Spec
	moments   moments
	placement Placement    // as the code placed it
	effective atomic.Int32 // the Placement its latest moment ran under; 0 before one
	handler   Handler
	skipBusy  bool
	workers   int
	loc       *time.Location // FiredAt's zone
	running   atomic.Int64   // runs in flight on this instance
	tally     tally          // runs and failures, told in the heartbeat
	catchUp   catchUp        // zero: missed moments are not run

	idleMu sync.Mutex
	idle   chan struct{} // closed when running drops to zero (waitIdle)
}

// current is e's placement as its latest moment here ran it: an operator's
// override (SetPlacement), or its code's.
func (e *entry) current() Placement {
	if p := Placement(e.effective.Load()); p != 0 {
		return p
	}
	return e.placement
}

// runners is how many runs this instance has per moment of e.
func (e *entry) runners() int {
	if e.current() == EveryWorker {
		return e.workers
	}
	return 1
}

// New makes a Scheduler for one instance over db (a SQLite pool from
// modernc.org/sqlite or a Postgres pool from pgx's stdlib). It refuses a nil
// db and an option's value out of its bound with an error wrapping
// ErrInvalid; it touches no table until Start.
func New(db *sql.DB, opts ...Option) (*Scheduler, error) {
	if db == nil {
		return nil, fmt.Errorf("schedule.New: %w: the *sql.DB is nil; give the pool the instances share", ErrInvalid)
	}
	cfg := newConfig{workers: runtime.NumCPU(), clock: clock.Host{}, beat: DefaultHeartbeat, logger: slog.Default()}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&cfg); err != nil {
			return nil, fmt.Errorf("schedule.New: %w", err)
		}
	}
	if cfg.ttl == 0 {
		cfg.ttl = 4 * cfg.beat
	}
	if cfg.ttl <= cfg.beat {
		return nil, fmt.Errorf("schedule.New: %w: HeartbeatTTL(%v) must exceed HeartbeatEvery(%v), or a live instance would drop out between its heartbeats", ErrInvalid, cfg.ttl, cfg.beat)
	}
	d, err := dialect.Detect(db)
	if err != nil {
		return nil, fmt.Errorf("schedule: %w", err)
	}
	s := &Scheduler{
		db:      db,
		d:       d,
		clk:     cfg.clock,
		log:     cfg.logger,
		name:    cfg.instance,
		workers: cfg.workers,
		beat:    cfg.beat,
		ttl:     cfg.ttl,
		lease:   cfg.beat,
		byName:  map[string]*entry{},
		token:   randomToken(),
		held:    map[shareKey]*heldShare{},
	}
	if s.name == "" {
		s.name = defaultInstance()
	}
	enc := dialect.EncodingFor(d.Kind, "TEXT")
	s.times = dialect.Times{Kind: d.Kind, Encoding: enc, InDatabase: clock.InDatabase(s.clk)}
	s.sql = d.Schedule(s.times)
	s.placements = d.Placements()
	return s, nil
}

// Name returns this instance's name in the heartbeats table.
func (s *Scheduler) Name() string { return s.name }

// Add registers a schedule: its name (unique on this Scheduler, and the
// same on every instance that shares it), when it fires, where it runs and
// what it runs. Every instance that should take part in a schedule adds it
// with the same name, spec and placement. Add is refused after Start.
func (s *Scheduler) Add(name string, spec Spec, placement Placement, handler Handler, opts ...AddOption) error {
	if name == "" {
		return fmt.Errorf("%w: schedule name is empty", ErrInvalid)
	}
	if len(name) > 200 {
		return fmt.Errorf("%w: schedule name %.40q... is longer than 200 bytes", ErrInvalid, name)
	}
	m, err := spec.compile(s.clk.Now())
	if err != nil {
		return fmt.Errorf("%w: schedule %q: %w", ErrInvalid, name, err)
	}
	switch placement {
	case One, EveryInstance, EveryWorker:
	default:
		return fmt.Errorf("%w: schedule %q: unknown placement %v; use One, EveryInstance or EveryWorker", ErrInvalid, name, placement)
	}
	if handler == nil {
		return fmt.Errorf("%w: schedule %q: nil handler", ErrInvalid, name)
	}
	e := &entry{name: name, spec: spec, moments: m, placement: placement, handler: handler, workers: s.workers, loc: m.zone()}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(e); err != nil {
			return fmt.Errorf("%w: schedule %q: %w", ErrInvalid, name, err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != 0 {
		return fmt.Errorf("%w: schedule %q: Add after Start; add every schedule before the Scheduler starts", ErrInvalid, name)
	}
	if _, dup := s.byName[name]; dup {
		return fmt.Errorf("%w: schedule %q is already added", ErrInvalid, name)
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
// scheduler already runs under the same Instance.
var ErrDuplicateInstance = errors.New("schedule: instance name already in use")
