package dialect

import "time"

// The lock store's statements, each a type whose Call takes its parameters
// by name and type (see Call) and writes them as the engine reads them:
// Postgres takes durations in microseconds and runs on its own clock;
// SQLite takes now and durations in Unix milliseconds; MariaDB and MySQL
// take now and expiries as UTC times.

// LockAcquireSQL takes a free place (see LockSQL.Acquire).
type LockAcquireSQL struct{ text }

// Call takes a place of lock (namespace, name), at most maxHolders, for
// secret, lasting ttl from now. Postgres looks from slot from up (0: the
// lowest free slot) and ignores now; SQLite ignores from.
func (s LockAcquireSQL) Call(namespace, name, secret string, now time.Time, ttl time.Duration, maxHolders, from int) Call {
	if s.kind == Postgres {
		return s.call(namespace, name, secret, ttl.Microseconds(), maxHolders, from)
	}
	return s.call(namespace, name, secret, now.UnixMilli(), ttl.Milliseconds(), maxHolders)
}

// LockNearestSQL answers the time until a lock's nearest expiry (SQLite).
type LockNearestSQL struct{ text }

// Call asks about the first maxHolders places of lock (namespace, name) at
// now.
func (s LockNearestSQL) Call(namespace, name string, now time.Time, maxHolders int) Call {
	return s.call(namespace, name, now.UnixMilli(), maxHolders)
}

// LockExtendSQL makes a live place last longer (see LockSQL.Extend).
type LockExtendSQL struct{ text }

// Call makes place slot of lock (namespace, name), held with secret, last
// ttl from now (Postgres ignores now: it runs on its own clock).
func (s LockExtendSQL) Call(namespace, name string, slot int, secret string, now time.Time, ttl time.Duration) Call {
	switch s.kind {
	case Postgres:
		return s.call(namespace, name, slot, secret, ttl.Microseconds())
	case MySQL:
		return s.call(namespace, name, slot, secret, MySQLTime(now), MySQLTime(now.Add(ttl)))
	}
	return s.call(namespace, name, slot, secret, ttl.Milliseconds(), now.UnixMilli())
}

// LockReleaseSQL frees a live place (Release, ReleaseKeep).
type LockReleaseSQL struct{ text }

// Call frees place slot of lock (namespace, name), held with secret, live
// at now. Postgres ignores now and notifies wakeKey; SQLite ignores wakeKey.
func (s LockReleaseSQL) Call(namespace, name string, slot int, secret, wakeKey string, now time.Time) Call {
	switch s.kind {
	case Postgres:
		return s.call(namespace, name, slot, secret, wakeKey)
	case MySQL:
		return s.call(namespace, name, slot, secret, MySQLTime(now))
	}
	return s.call(namespace, name, slot, secret, now.UnixMilli())
}

// LockSweepSQL deletes the rows of ended holds (see LockSQL.Sweep).
type LockSweepSQL struct{ text }

// Call deletes a batch of holds ended by now (Postgres ignores now).
func (s LockSweepSQL) Call(now time.Time) Call {
	switch s.kind {
	case Postgres:
		return s.call()
	case MySQL:
		return s.call(MySQLTime(now))
	}
	return s.call(now.UnixMilli())
}
