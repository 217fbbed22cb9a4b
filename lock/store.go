package lock

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// Store keeps the places of locks. A Locker checks its input before it calls
// a store; a store answers for the truth of every place: it never reports a
// place held that is not. Stores here: SQL (Postgres, SQLite, MariaDB,
// MySQL), Redis, Memory.
type Store interface {
	// Acquire takes a free place below maxHolders on k for ttl (the lowest
	// one, unless concurrent takers race for it), marking it with secret,
	// in one step (one round trip where there is a network, more only after
	// a race lost on Postgres). A place is free when never taken, released,
	// or past its expiry on the store's clock. When a place is free it
	// takes one: concurrent takers of N free places all get one. When every place is held it answers
	// Acquired false and, in Expiry, how long until the nearest holder's
	// expiry (or -1 when unknown).
	Acquire(ctx context.Context, k Key, secret string, ttl time.Duration, maxHolders int) (Grant, error)
	// Extend makes the live place slot of k marked with secret last ttl
	// from now; Acquired false when that place is no longer so marked and
	// live. The fence stays.
	Extend(ctx context.Context, k Key, slot int, secret string, ttl time.Duration) (Grant, error)
	// Release frees the live place slot of k marked with secret and wakes
	// the waiters of k wherever they run; false when it was not live.
	Release(ctx context.Context, k Key, slot int, secret string) (bool, error)
	// Subscribe returns the wakes that releases of k raise. A wake is a
	// hint: the waiter tries again.
	Subscribe(ctx context.Context, k Key) (Wakes, error)
}

// Key names one lock: a name within a namespace.
type Key struct {
	Namespace, Name string
}

// WakeKey is a short fixed-length form of the key, for notifications.
func (k Key) WakeKey() string {
	sum := sha256.Sum256([]byte(k.Namespace + "\x00" + k.Name))
	return hex.EncodeToString(sum[:12])
}

// Grant is a store's answer to Acquire or Extend.
type Grant struct {
	// Acquired tells whether the place was taken (or extended).
	Acquired bool
	// Slot is the place taken.
	Slot int
	// Fence is the acquisition's fencing number.
	Fence int64
	// TTL is how long the place is held from the store's now.
	TTL time.Duration
	// Expiry, when not acquired, is how long until the nearest holder's
	// expiry: zero when a race was just lost, -1 when unknown.
	Expiry time.Duration
}

// Wakes delivers release wakes to one waiter.
type Wakes interface {
	// C delivers at most one pending wake.
	C() <-chan struct{}
	// Close stops the wakes.
	Close()
}
