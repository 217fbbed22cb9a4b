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
//
// It keeps the live holds only: a release drops its place, and every call
// drops the places whose holds ended before it, so a name costs nothing once
// its holds have ended and the store has been called since.
type Memory struct {
	clock clock.Clock
	hub   *notify.Hub

	mu    sync.Mutex
	fence int64 // the last fencing number, of every name: names come and go
	locks map[Key]map[int]*memSlot
	ends  expiries[*memSlot]
}

type memSlot struct {
	key    Key
	slot   int
	secret string
	fence  int64
	end    *expiry[*memSlot]
}

// memChannel is the hub channel of Memory's wakes.
const memChannel = "lock"

// NewMemory returns an empty memory store whose holds expire on c
// (default clock.Host when nil).
func NewMemory(c clock.Clock) *Memory {
	return &Memory{clock: clock.OrHost(c), hub: notify.NewHub(), locks: map[Key]map[int]*memSlot{}}
}

// reap drops the places whose holds ended at now. m.mu is held.
func (m *Memory) reap(now time.Time) {
	for {
		s, ok := m.ends.popEnded(now)
		if !ok {
			return
		}
		m.drop(s)
	}
}

// drop forgets a place (its heap entry already gone). m.mu is held.
func (m *Memory) drop(s *memSlot) {
	slots := m.locks[s.key]
	delete(slots, s.slot)
	if len(slots) == 0 {
		delete(m.locks, s.key)
	}
}

// Acquire implements Store.
func (m *Memory) Acquire(ctx context.Context, k Key, secret string, ttl time.Duration, maxHolders int) (Grant, error) {
	if err := ctx.Err(); err != nil {
		return Grant{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	m.reap(now)
	slots := m.locks[k]
	nearest := time.Duration(-1)
	for s := 0; s < maxHolders; s++ {
		if cur, ok := slots[s]; ok {
			if d := cur.end.at.Sub(now); nearest < 0 || d < nearest {
				nearest = d
			}
			continue
		}
		if slots == nil {
			slots = map[int]*memSlot{}
			m.locks[k] = slots
		}
		m.fence++
		ms := &memSlot{key: k, slot: s, secret: secret, fence: m.fence}
		ms.end = m.ends.push(ms, now.Add(ttl))
		slots[s] = ms
		return Grant{Acquired: true, Slot: s, Fence: m.fence, TTL: ttl}, nil
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
	m.reap(now)
	cur, ok := m.locks[k][slot]
	if !ok || cur.secret != secret {
		return Grant{}, nil
	}
	m.ends.move(cur.end, now.Add(ttl))
	return Grant{Acquired: true, Slot: slot, Fence: cur.fence, TTL: ttl}, nil
}

// Release implements Store.
func (m *Memory) Release(ctx context.Context, k Key, slot int, secret string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	m.mu.Lock()
	m.reap(m.clock.Now())
	cur, ok := m.locks[k][slot]
	ok = ok && cur.secret == secret
	if ok {
		m.ends.remove(cur.end)
		m.drop(cur)
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
