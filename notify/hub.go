// Package notify carries wake-ups: hints that work may be waiting, never the
// work itself. The Hub wakes waiters in the same process; a Listener carries
// Postgres NOTIFY from other processes into a Hub.
//
// A wake lands in a buffered channel of one with a non-blocking send, so a
// burst of wakes costs one channel operation each and coalesces into a single
// pending wake per waiter.
//
//	w := notify.Default.Subscribe("invoice_jobs", "")
//	defer w.Close()
//	<-w.C() // woken by notify.Default.Wake("invoice_jobs", "eu")
package notify

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
	"sync"
)

// Default is the process's hub: brokers, lockers and schedulers share it, so
// a publish or a release in one wakes waiters in every other of the process.
var Default = NewHub()

// Hub routes wakes to waiters by channel and key. On Postgres a channel is a
// LISTEN channel (a table's name) and a key is a notification's payload (a
// group); an empty key means every key of the channel.
type Hub struct {
	mu       sync.RWMutex
	channels map[string]map[*Waiter]struct{}
	id       string // in Stamp's payloads
}

// NewHub returns an empty hub.
func NewHub() *Hub {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return &Hub{channels: map[string]map[*Waiter]struct{}{}, id: hex.EncodeToString(b[:])}
}

// stampSep ends a payload's key where a hub's id follows (see Stamp).
const stampSep = "\x1f"

// Stamp returns the payload of a notification for key sent by a writer that
// has woken this hub's waiters itself: a Listener feeding this hub skips it,
// so its process is not woken twice for one write. (The second wake made a
// claim that found nothing, and the wake cooldown then held the next
// publish's claim: Postgres with ListenNotify, publish to handler start p50
// 2.6 ms; skipped, 0.6 ms.) Other processes read the key and wake as for an
// unstamped payload.
//
// A listener of an earlier version, which takes the whole payload for the
// key, wakes only its subscriptions of every group on a stamped payload, and
// the others at their poll: during a rolling upgrade from one, publishes of
// the new version reach grouped subscriptions of the old at the poll.
func (h *Hub) Stamp(key string) string { return key + stampSep + h.id }

// unstamp splits a payload into its key and the id of the hub that stamped
// it ("" for an unstamped payload: one that does not end in the separator
// and 16 lowercase hex digits).
func unstamp(payload string) (key, hub string) {
	i := strings.LastIndex(payload, stampSep)
	if i < 0 || len(payload)-i-len(stampSep) != 16 {
		return payload, ""
	}
	id := payload[i+len(stampSep):]
	for _, c := range []byte(id) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return payload, ""
		}
	}
	return payload[:i], id
}

// Waiter receives the wakes of one channel and key.
type Waiter struct {
	hub     *Hub
	channel string
	key     string
	c       chan struct{}
}

// Subscribe returns a waiter for wakes on channel with key. A waiter with an
// empty key is woken by every wake of the channel.
func (h *Hub) Subscribe(channel, key string) *Waiter {
	w := &Waiter{hub: h, channel: channel, key: key, c: make(chan struct{}, 1)}
	h.mu.Lock()
	defer h.mu.Unlock()
	set := h.channels[channel]
	if set == nil {
		set = map[*Waiter]struct{}{}
		h.channels[channel] = set
	}
	set[w] = struct{}{}
	return w
}

// Wake wakes the waiters of channel whose key is key, and those with an empty
// key; an empty key wakes every waiter of the channel. It never blocks.
func (h *Hub) Wake(channel, key string) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for w := range h.channels[channel] {
		if key == "" || w.key == "" || w.key == key {
			w.Wake()
		}
	}
}

// WakeAll wakes every waiter of every channel: after a lost connection, when
// what was announced in the gap is unknown.
func (h *Hub) WakeAll() {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for _, set := range h.channels {
		for w := range set {
			w.Wake()
		}
	}
}

// Channels lists the channels that have waiters.
func (h *Hub) Channels() []string {
	h.mu.RLock()
	defer h.mu.RUnlock()
	out := make([]string, 0, len(h.channels))
	for c := range h.channels {
		out = append(out, c)
	}
	return out
}

// C delivers at most one pending wake.
func (w *Waiter) C() <-chan struct{} { return w.c }

// Wake wakes this waiter alone.
func (w *Waiter) Wake() {
	select {
	case w.c <- struct{}{}:
	default:
	}
}

// Close stops the waiter's wakes.
func (w *Waiter) Close() {
	h := w.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	if set := h.channels[w.channel]; set != nil {
		delete(set, w)
		if len(set) == 0 {
			delete(h.channels, w.channel)
		}
	}
}
