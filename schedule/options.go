package schedule

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/sqlinbox/sqlinbox/clock"
)

// Defaults of the options.
const (
	// DefaultHeartbeat is how often an instance renews its heartbeats
	// without HeartbeatEvery.
	DefaultHeartbeat = 5 * time.Second
	// DefaultHeartbeatTTL is the lifetime of a heartbeat without
	// HeartbeatEvery and HeartbeatTTL: four heartbeats.
	DefaultHeartbeatTTL = 4 * DefaultHeartbeat
	// MomentRetention is how many HeartbeatTTLs a moment's row is kept
	// after it fired and was written. An instance reaching a moment more
	// than a HeartbeatTTL late skips it (or, with CatchUp, fires only the
	// moments after the latest row), so it never needs a pruned row. Each
	// schedule's latest moment is kept however old: CatchUp counts from it.
	MomentRetention = 10
	// MaxCatchUp is the most moments CatchUp may run after an outage.
	MaxCatchUp = 1000
)

// Option configures New. A value out of its bound makes New fail with an
// error wrapping ErrInvalid that names the option, the value and the bound.
type Option func(*newConfig) error

type newConfig struct {
	instance  string
	workers   int
	clock     clock.Clock
	beat, ttl time.Duration
	logger    *slog.Logger
}

// Instance names this instance in the heartbeats table; it must be unique
// among the instances sharing the database: Start fails with
// ErrDuplicateInstance when another live scheduler holds it, and waits for
// the hold of one that died to expire (see Start). Default: host name,
// process id and a random suffix. Bound: not empty.
func Instance(name string) Option {
	return func(c *newConfig) error {
		if name == "" {
			return fmt.Errorf("%w: Instance(\"\"); give a name unique among the instances, or leave the option out for one made of host, pid and a random suffix", ErrInvalid)
		}
		c.instance = name
		return nil
	}
}

// DefaultWorkers is how many runs an EveryWorker schedule has per moment on
// this instance, unless its Add gives Workers. Default: runtime.NumCPU().
// Bound: at least 1.
func DefaultWorkers(n int) Option {
	return func(c *newConfig) error {
		if n < 1 {
			return fmt.Errorf("%w: DefaultWorkers(%d); give at least 1, or leave the option out for one per core", ErrInvalid, n)
		}
		c.workers = n
		return nil
	}
}

// WithClock tells the time and paces heartbeats and moments. With
// clock.Database, heartbeat expiry is compared with the database's now().
// Default: clock.Host. Bound: not nil.
func WithClock(clk clock.Clock) Option {
	return func(c *newConfig) error {
		if clk == nil {
			return fmt.Errorf("%w: WithClock(nil); give a clock, or leave the option out for clock.Host", ErrInvalid)
		}
		c.clock = clk
		return nil
	}
}

// HeartbeatEvery is how often this instance renews its heartbeats. It is also a
// share's lease: a share whose runner died is taken over by another instance
// between one and one and a third heartbeats after its last renewal
// (running shares are renewed, and orphans looked for, every third of a
// heartbeat). Default: DefaultHeartbeat (5s). Bound: at least 3ms (a third
// of it paces renewals) and below HeartbeatTTL.
func HeartbeatEvery(d time.Duration) Option {
	return func(c *newConfig) error {
		if d < 3*time.Millisecond {
			return fmt.Errorf("%w: HeartbeatEvery(%v); give at least 3ms, or leave the option out for the default %v", ErrInvalid, d, DefaultHeartbeat)
		}
		c.beat = d
		return nil
	}
}

// HeartbeatTTL is how long a heartbeat lasts: an instance that dies leaves
// the membership this long after its last heartbeat. Default: four
// heartbeats (DefaultHeartbeatTTL, 20s, with the default HeartbeatEvery).
// Bound: above HeartbeatEvery, or a live instance would drop out between its
// heartbeats.
func HeartbeatTTL(d time.Duration) Option {
	return func(c *newConfig) error {
		if d <= 0 {
			return fmt.Errorf("%w: HeartbeatTTL(%v); give more than HeartbeatEvery, or leave the option out for four heartbeats", ErrInvalid, d)
		}
		c.ttl = d
		return nil
	}
}

// WithLogger receives handler errors and panics (Error), skipped moments
// (Warn, or Info for SkipWhileBusy) and database errors. Default:
// slog.Default(). Bound: not nil.
func WithLogger(l *slog.Logger) Option {
	return func(c *newConfig) error {
		if l == nil {
			return fmt.Errorf("%w: WithLogger(nil); give a logger, or leave the option out for slog.Default()", ErrInvalid)
		}
		c.logger = l
		return nil
	}
}

// AddOption adjusts one schedule at Add. A value out of its bound makes Add
// fail with an error wrapping ErrInvalid.
type AddOption func(*entry) error

// SkipWhileBusy skips a moment on this instance while a run of the previous
// moment on this instance is still busy: the moment's shares dealt to it are
// dropped, not taken over by others, and it takes over no share of another
// instance meanwhile. Default: the next moment runs anyway, beside the busy
// one (guard shared items with locks). With One, an instance that skips does
// not compete for the moment, so another instance may run it.
func SkipWhileBusy() AddOption {
	return func(e *entry) error { e.skipBusy = true; return nil }
}

// Workers sets how many runs an EveryWorker schedule has on this instance
// per moment. Default: New's DefaultWorkers (one per core). Bound: at least
// 1, and only on EveryWorker schedules: the other placements have one run a
// moment per instance or in all.
func Workers(n int) AddOption {
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

// CatchUp runs the moments every instance missed, such as while all were
// stopped or the database was unreachable: when the first instance comes
// back (at Start, or at the first moment it writes again), each moment
// after the latest one any instance wrote, within window before now, is run
// once, oldest first, each with its own FiredAt (computed from the spec,
// not the time it runs) and its shares dealt among the instances live then,
// as a moment on time is. No more than most of them run, the latest: an
// outage of a day on Every(time.Second) with CatchUp(24*time.Hour, 10) runs
// the last ten seconds' moments, and logs (Warn) the span it left out.
// Instances that come back at once still run each moment once: the first to
// write a moment's row deals it.
//
// A moment counts as missed only after the latest moment written; a
// schedule that never ran has missed none. The catch-up first takes over
// the shares of moments within window that no instance finished (their
// runner went away with every other instance), which a sweep looks for
// only a HeartbeatTTL past their lease. With SkipWhileBusy, each missed
// moment waits for this instance's runs of the one before it, so they run
// one after another; otherwise they run side by side, as late moments do.
// Default: missed moments are not run. Bound: window above zero, most from
// 1 to MaxCatchUp.
func CatchUp(window time.Duration, most int) AddOption {
	return func(e *entry) error {
		switch {
		case window <= 0:
			return fmt.Errorf("CatchUp(%v, %d): the window must be above zero; leave the option out to run no missed moment", window, most)
		case most < 1 || most > MaxCatchUp:
			return fmt.Errorf("CatchUp(%v, %d): most must be from 1 to %d (MaxCatchUp)", window, most, MaxCatchUp)
		}
		e.catchUp = catchUp{window: window, most: most}
		return nil
	}
}
