package lock

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/notify"
)

// Every option below checks its value when it is applied: New, Take, NewSQL
// and NewRedis refuse a value out of its bound with an error wrapping
// ErrInvalid that names the option, the value and the bound, before they
// create anything or ask the store.

// Defaults and bounds of the options.
const (
	// DefaultTTL is how long a hold lasts without TTL (and an Extend with a
	// zero ttl).
	DefaultTTL = 30 * time.Second
	// DefaultRetryDelay is the longest a waiter sleeps between attempts when
	// nothing wakes it, without RetryDelay.
	DefaultRetryDelay = 250 * time.Millisecond
	// DefaultSweepEvery is how often a SQL store sweeps expired holds
	// without SweepEvery.
	DefaultSweepEvery = time.Minute
	// DefaultRedisPrefix starts a Redis store's keys without RedisPrefix.
	DefaultRedisPrefix = "sqlinbox:"
	// MaxName is the longest lock name or namespace accepted, in bytes.
	MaxName = 255
	// HoldersLimit bounds MaxHolders: each place is a row (or field) of its
	// own, and a waiter looks at every one.
	HoldersLimit = 10000
)

// Option configures New.
type Option func(*lockerConfig) error

type lockerConfig struct {
	namespace string
	clock     clock.Clock
}

// Namespace holds the locker's names apart from every other namespace's (a
// tenant, an account). Default: "", itself a namespace. Bound: at most
// MaxName bytes of UTF-8 without a NUL byte.
func Namespace(ns string) Option {
	return func(c *lockerConfig) error {
		if len(ns) > MaxName {
			return fmt.Errorf("%w: Namespace(%.32q...) is %d bytes; give at most %d", ErrInvalid, ns, len(ns), MaxName)
		}
		if err := checkText("Namespace", ns); err != nil {
			return err
		}
		c.namespace = ns
		return nil
	}
}

// WithClock paces the locker's waiters (deadlines, retry delays).
// Default: clock.Host. Bound: not nil. Expiry is measured by the store: the
// database's or Redis server's clock, or for Memory and SQLite the clock
// given to the store (NewMemory, SQLClock).
func WithClock(c clock.Clock) Option {
	return func(cfg *lockerConfig) error {
		if c == nil {
			return fmt.Errorf("%w: WithClock(nil); give a clock, or leave the option out for clock.Host", ErrInvalid)
		}
		cfg.clock = c
		return nil
	}
}

// TakeOption shapes one Take. Without options Take asks for a mutex for
// DefaultTTL without waiting and answers false when another holds it.
type TakeOption func(*takeConfig) error

type takeConfig struct {
	ttl, wait, retryDelay time.Duration
	tries, maxHolders     int
	mustAcquire           bool
}

func takeDefaults() takeConfig {
	return takeConfig{ttl: DefaultTTL, retryDelay: DefaultRetryDelay, maxHolders: 1}
}

// TTL is how long the hold lasts at most: once it passes the holder is no
// holder and its place goes to the next. Default: DefaultTTL (30s). Bound:
// at least 1ms (stores keep milliseconds).
func TTL(d time.Duration) TakeOption {
	return func(c *takeConfig) error {
		if d < time.Millisecond {
			return fmt.Errorf("%w: TTL(%v); give at least 1ms (stores keep milliseconds), or leave the option out for the default %v", ErrInvalid, d, DefaultTTL)
		}
		c.ttl = d
		return nil
	}
}

// Wait is how long to wait for a place. Default: 0, no wait (one attempt,
// unless Tries asks for more). Bound: not negative.
func Wait(d time.Duration) TakeOption {
	return func(c *takeConfig) error {
		if d < 0 {
			return fmt.Errorf("%w: Wait(%v); give a positive duration, or zero for no wait", ErrInvalid, d)
		}
		c.wait = d
		return nil
	}
}

// Tries caps the attempts of one Take, a woken or timed retry each counting
// as one. Default: 0, no cap within Wait. With no Wait and Tries above one,
// the call waits until its tries are spent. Bound: not negative.
func Tries(n int) TakeOption {
	return func(c *takeConfig) error {
		if n < 0 {
			return fmt.Errorf("%w: Tries(%d); give a positive count, or zero for no cap", ErrInvalid, n)
		}
		c.tries = n
		return nil
	}
}

// RetryDelay is the longest a waiter sleeps between attempts when no release
// wakes it and no holder's expiry comes sooner: the poll that floors missed
// wakes (SQLite pools of other processes rely on it). Default:
// DefaultRetryDelay (250ms). Bound: at least 1ms.
func RetryDelay(d time.Duration) TakeOption {
	return func(c *takeConfig) error {
		if d < time.Millisecond {
			return fmt.Errorf("%w: RetryDelay(%v); give at least 1ms, or leave the option out for the default %v", ErrInvalid, d, DefaultRetryDelay)
		}
		c.retryDelay = d
		return nil
	}
}

// MaxHolders is how many may hold the name at once: 1 is a mutex, N a
// counting semaphore. Every caller of one name should use the same value.
// Default: 1. Bound: 1 to HoldersLimit (10000).
func MaxHolders(n int) TakeOption {
	return func(c *takeConfig) error {
		if n < 1 || n > HoldersLimit {
			return fmt.Errorf("%w: MaxHolders(%d); give 1 to %d", ErrInvalid, n, HoldersLimit)
		}
		c.maxHolders = n
		return nil
	}
}

// MustAcquire turns a false answer into an error wrapping ErrNotAcquired (a
// *NotAcquiredError naming the lock and the wait). Default: off, a false
// answer.
func MustAcquire() TakeOption {
	return func(c *takeConfig) error {
		c.mustAcquire = true
		return nil
	}
}

// SQLOption configures NewSQL.
type SQLOption func(*sqlConfig) error

type sqlConfig struct {
	clock    clock.Clock
	listener *notify.Listener
	hub      *notify.Hub
	logger   *slog.Logger
	sweep    time.Duration
}

// SQLClock is the clock SQLite holds expire on; Postgres always uses the
// database's now(). Default: clock.Host. Bound: not nil.
func SQLClock(c clock.Clock) SQLOption {
	return func(cfg *sqlConfig) error {
		if c == nil {
			return fmt.Errorf("%w: SQLClock(nil); give a clock, or leave the option out for clock.Host", ErrInvalid)
		}
		cfg.clock = c
		return nil
	}
}

// SQLListener (Postgres) hands the store a running notify.Listener and the
// hub it wakes, such as a broker's: the store listens on them instead of
// keeping a pool connection of its own. Default: none, the store runs its
// own listener until Close. Bound: both not nil.
func SQLListener(l *notify.Listener, hub *notify.Hub) SQLOption {
	return func(cfg *sqlConfig) error {
		if l == nil || hub == nil {
			return fmt.Errorf("%w: SQLListener with a nil listener or hub; give a running listener and the hub it wakes, or leave the option out", ErrInvalid)
		}
		cfg.listener, cfg.hub = l, hub
		return nil
	}
}

// SQLLogger logs the store's own listener's reconnections and failed
// sweeps. Default: slog.Default(). Bound: not nil.
func SQLLogger(l *slog.Logger) SQLOption {
	return func(cfg *sqlConfig) error {
		if l == nil {
			return fmt.Errorf("%w: SQLLogger(nil); give a logger, or leave the option out for slog.Default()", ErrInvalid)
		}
		cfg.logger = l
		return nil
	}
}

// SweepEvery is how often the store deletes the rows of expired holds (a
// release deletes its own at once); zero means never, when another
// instance's store sweeps the table. Default: DefaultSweepEvery (1m).
// Bound: zero, or at least 1ms.
func SweepEvery(d time.Duration) SQLOption {
	return func(cfg *sqlConfig) error {
		if d < 0 || (d > 0 && d < time.Millisecond) {
			return fmt.Errorf("%w: SweepEvery(%v); give at least 1ms, or zero for no sweep", ErrInvalid, d)
		}
		cfg.sweep = d
		return nil
	}
}

// RedisOption configures NewRedis.
type RedisOption func(*redisConfig) error

type redisConfig struct {
	prefix string
	logger *slog.Logger
}

// RedisPrefix starts every key and the release channel, so several
// applications can share one Redis. Default: DefaultRedisPrefix
// ("sqlinbox:"). Bound: not empty.
func RedisPrefix(p string) RedisOption {
	return func(cfg *redisConfig) error {
		if p == "" {
			return fmt.Errorf("%w: RedisPrefix(\"\"); give a prefix, or leave the option out for %q", ErrInvalid, DefaultRedisPrefix)
		}
		cfg.prefix = p
		return nil
	}
}

// RedisLogger logs the loss of the release subscription. Default:
// slog.Default(). Bound: not nil.
func RedisLogger(l *slog.Logger) RedisOption {
	return func(cfg *redisConfig) error {
		if l == nil {
			return fmt.Errorf("%w: RedisLogger(nil); give a logger, or leave the option out for slog.Default()", ErrInvalid)
		}
		cfg.logger = l
		return nil
	}
}

// apply runs options over cfg, stopping at the first refusal.
func apply[C any, O ~func(*C) error](cfg *C, opts []O) error {
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(cfg); err != nil {
			return err
		}
	}
	return nil
}

// Waits reports whether a Take with opts may wait (Wait above zero, or Tries
// above one), for wrappers that measure waits apart. Options out of their
// bound answer false: such a Take fails at once.
func Waits(opts ...TakeOption) bool {
	o := takeDefaults()
	if apply(&o, opts) != nil {
		return false
	}
	return o.wait > 0 || o.tries > 1
}
