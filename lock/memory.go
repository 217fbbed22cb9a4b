package lock

import (
	"context"
	"sync"
	"time"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/notify"
)

// Memory keeps locks in the process's memory, for a service with no shared
// store: the same semantics as the other stores, within one process. Share
// one Memory between the lockers that must meet.
type Memory struct {
	clock clock.Clock
	hub   *notify.Hub

	mu    sync.Mutex
	locks map[Key]*memLock
}

type memLock struct {
	fence int64
	slots map[int]memSlot
}

type memSlot struct {
	secret  string
	fence   int64
	expires time.Time
}

// memChannel is the hub channel of Memory's wakes.
const memChannel = "lock"

// NewMemory returns an empty memory store whose holds expire on c
// (default clock.Host when nil).
func NewMemory(c clock.Clock) *Memory {
	return &Memory{clock: clock.OrHost(c), hub: notify.NewHub(), locks: map[Key]*memLock{}}
}

// Acquire implements Store.
func (m *Memory) Acquire(ctx context.Context, k Key, secret string, ttl time.Duration, maxHolders int) (Grant, error) {
	if err := ctx.Err(); err != nil {
		return Grant{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	l := m.locks[k]
	if l == nil {
		l = &memLock{slots: map[int]memSlot{}}
		m.locks[k] = l
	}
	nearest := time.Duration(-1)
	for s := 0; s < maxHolders; s++ {
		cur, ok := l.slots[s]
		if ok && cur.expires.After(now) {
			if d := cur.expires.Sub(now); nearest < 0 || d < nearest {
				nearest = d
			}
			continue
		}
		l.fence++
		l.slots[s] = memSlot{secret: secret, fence: l.fence, expires: now.Add(ttl)}
		return Grant{Acquired: true, Slot: s, Fence: l.fence, TTL: ttl}, nil
	}
	return Grant{Expiry: nearest}, nil
}

// Extend implements Store.
func (m *Memory) Extend(ctx context.Context, k Key, slot int, secret string, ttl time.Duration) (Grant, error) {
	if err := ctx.Err(); err != nil {
		return Grant{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	l := m.locks[k]
	if l == nil {
		return Grant{}, nil
	}
	cur, ok := l.slots[slot]
	if !ok || cur.secret != secret || !cur.expires.After(now) {
		return Grant{}, nil
	}
	cur.expires = now.Add(ttl)
	l.slots[slot] = cur
	return Grant{Acquired: true, Slot: slot, Fence: cur.fence, TTL: ttl}, nil
}

// Release implements Store.
func (m *Memory) Release(ctx context.Context, k Key, slot int, secret string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	m.mu.Lock()
	l := m.locks[k]
	ok := false
	if l != nil {
		cur, found := l.slots[slot]
		if found && cur.secret == secret && cur.expires.After(m.clock.Now()) {
			delete(l.slots, slot)
			ok = true
		}
	}
	m.mu.Unlock()
	if ok {
		m.hub.Wake(memChannel, k.WakeKey())
	}
	return ok, nil
}

// Subscribe implements Store.
func (m *Memory) Subscribe(ctx context.Context, k Key) (Wakes, error) {
	return m.hub.Subscribe(memChannel, k.WakeKey()), nil
}
