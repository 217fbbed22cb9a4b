// Package lock keeps a piece of work to one holder, or to a few, across every
// instance that shares a store: Postgres, SQLite, Redis, or the process's
// memory.
//
// A hold ends by itself when its TTL passes, so a holder that crashed blocks
// the others only until then. A waiter never spins: it sleeps until a release
// wakes it, the nearest holder's expiry, its retry delay or its deadline.
//
//	locker, _ := lock.New(store, lock.Namespace("tenant-42"))
//	h, ok, err := locker.Take(ctx, "invoice:1001", lock.TTL(time.Minute))
//	if err != nil || !ok {
//		return err // another call holds it
//	}
//	defer locker.Release(ctx, h.Token)
package lock

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/internal/config"
)

// Hold is one place held on a lock.
type Hold struct {
	// Namespace and Name name the lock.
	Namespace, Name string
	// Token releases (Release) or extends (Extend) the hold. It is opaque;
	// keep it as is.
	Token string
	// Fence grows with every new acquisition of the name in its namespace
	// (not with extensions): pass it to downstream writes so a holder that
	// lost its hold cannot overwrite the work of the next.
	Fence int64
	// Slot is the place held, from zero to the MaxHolders asked, less one.
	Slot int
	// Expires is when the hold ends unless extended, on the locker's clock:
	// the TTL counted from just before the store was asked, so it errs
	// early (the store counts from its own now, a round trip later).
	Expires time.Time
}

var (
	// ErrNotAcquired is wrapped by the error of a Take with MustAcquire() that
	// found no place within its wait.
	ErrNotAcquired = errors.New("lock not acquired")
	// ErrNotHeld means a release or extension named no live hold: the token
	// was released, its TTL passed, or it was never taken.
	ErrNotHeld = errors.New("lock not held")
	// ErrWrongNamespace means a token taken in one namespace was used on a
	// locker of another.
	ErrWrongNamespace = errors.New("lock token of another namespace")
	// ErrInvalid marks bad input: a name, namespace, option or token the
	// call refuses before it reaches the store. It is the module's one
	// error of refused input: inbox.ErrInvalid and schedule.ErrInvalid are
	// the same value.
	ErrInvalid = config.ErrInvalid
)

// NotAcquiredError tells which lock was not acquired and how long the call
// waited. It matches ErrNotAcquired with errors.Is.
type NotAcquiredError struct {
	Namespace, Name string
	Waited          time.Duration
	Tries           int
	MaxHolders      int
}

func (e *NotAcquiredError) Error() string {
	held := "its one place is held"
	if e.MaxHolders > 1 {
		held = fmt.Sprintf("all %d places are held", e.MaxHolders)
	}
	return fmt.Sprintf("lock %s: not acquired after %s in %v: %s; wait longer (lock.Wait) or try later",
		quoteLock(e.Namespace, e.Name), plural(e.Tries, "try", "tries"), e.Waited.Round(time.Millisecond), held)
}

// Unwrap returns ErrNotAcquired.
func (e *NotAcquiredError) Unwrap() error { return ErrNotAcquired }

// Locker takes and releases locks of one namespace in one store. It is safe
// for concurrent use; make one per namespace and share it.
type Locker struct {
	store Store
	ns    string
	clock clock.Clock

	mu   sync.Mutex
	held map[string]map[string]*expiry[heldToken] // name -> token -> end: holds this locker took, not released
	ends expiries[heldToken]
}

// heldToken is a hold the locker remembers for ReleaseName until it is
// released or heldGrace past its expiry.
type heldToken struct{ name, token string }

// heldGrace is how long past a hold's expiry on the locker's clock the
// locker still remembers it for ReleaseName: the store counts the TTL from
// its own clock, a little later.
const heldGrace = time.Second

// New returns a locker over store, of the namespace Namespace gives (default
// ""). It refuses a nil store and an option's value out of its bound with an
// error wrapping ErrInvalid.
func New(store Store, opts ...Option) (*Locker, error) {
	if store == nil {
		return nil, fmt.Errorf("lock.New: %w: store is nil; give one of NewSQL, NewRedis or NewMemory", ErrInvalid)
	}
	var cfg lockerConfig
	if err := apply(&cfg, opts); err != nil {
		return nil, fmt.Errorf("lock.New: %w", err)
	}
	return &Locker{store: store, ns: cfg.namespace, clock: clock.OrHost(cfg.clock), held: map[string]map[string]*expiry[heldToken]{}}, nil
}

// Namespace returns the locker's namespace.
func (l *Locker) Namespace() string { return l.ns }

// Take asks for a new place on the lock name (Extend keeps one). It answers
// the hold and true when it got one; false (or, with MustAcquire(), an error
// wrapping ErrNotAcquired) when every place stayed held through its wait.
// An option's value out of its bound fails with an error wrapping
// ErrInvalid, before the store is asked.
//
// A store error fails a call that does not wait at once. A waiting call
// rides out store errors with backoff (10ms doubling, at most RetryDelay)
// and fails with the last one, saying how many came in a row, only when its
// wait (or Tries) ends. ctx ends the wait with ctx's error. A call that fails
// while its statement is in flight may leave a place taken that it does not
// report: that place frees itself at its TTL.
func (l *Locker) Take(ctx context.Context, name string, opts ...TakeOption) (Hold, bool, error) {
	if err := checkName(name); err != nil {
		return Hold{}, false, err
	}
	o := takeDefaults()
	if err := apply(&o, opts); err != nil {
		return Hold{}, false, fmt.Errorf("lock %s: take: %w", quoteLock(l.ns, name), err)
	}
	k := Key{Namespace: l.ns, Name: name}

	start := l.clock.Now()
	waits := o.wait > 0 || o.tries > 1 // as Waits answers
	var wakes Wakes
	if waits {
		w, err := l.store.Subscribe(ctx, k)
		if err != nil {
			return Hold{}, false, fmt.Errorf("lock %s: subscribe to releases: %w", quoteLock(l.ns, name), err)
		}
		defer w.Close()
		wakes = w
	}
	var failing storeFailure
	for tries := 1; ; tries++ {
		secret := newSecret()
		asked := l.clock.Now() // the hold ends TTL after the store's now, which comes later
		g, err := l.store.Acquire(ctx, k, secret, o.ttl, o.maxHolders)
		if err != nil && ctx.Err() != nil {
			return Hold{}, false, ctx.Err()
		}
		if err == nil && g.Acquired {
			h := l.hold(k, g, secret, asked)
			l.remember(h)
			return h, true, nil
		}
		now := l.clock.Now()
		elapsed := now.Sub(start)
		left := o.wait - elapsed
		over := !waits || (o.tries > 0 && tries >= o.tries) || (o.wait > 0 && left <= 0)
		var sleep time.Duration
		switch {
		case err != nil:
			// A store error within the wait is ridden out with backoff: a
			// cut connection or a restarting server comes back.
			failing.add(now, err)
			if over {
				return Hold{}, false, failing.error(quoteLock(l.ns, name), now, elapsed, waits)
			}
			sleep = failing.backoff(o.retryDelay)
		case over:
			if o.mustAcquire {
				return Hold{}, false, &NotAcquiredError{Namespace: l.ns, Name: name, Waited: elapsed, Tries: tries, MaxHolders: o.maxHolders}
			}
			return Hold{}, false, nil
		default:
			failing = storeFailure{}
			sleep = o.retryDelay
			if g.Expiry >= 0 {
				// A holder's expiry, plus a millisecond for stores that keep
				// milliseconds; zero is a race just lost: try again at once.
				sleep = min(sleep, g.Expiry+time.Millisecond)
			}
		}
		if o.wait > 0 {
			sleep = min(sleep, left)
		}
		if sleep <= 0 {
			continue
		}
		t := l.clock.NewTimer(sleep)
		select {
		case <-ctx.Done():
			t.Stop()
			return Hold{}, false, ctx.Err()
		case <-wakes.C():
			t.Stop()
		case <-t.C():
		}
	}
}

// storeFailure counts the store errors of one Take in a row.
type storeFailure struct {
	n     int
	since time.Time
	last  error
}

func (f *storeFailure) add(now time.Time, err error) {
	if f.n == 0 {
		f.since = now
	}
	f.n++
	f.last = err
}

// backoff is the sleep before the next try: 10ms doubling with each error
// in a row, at most the retry delay.
func (f *storeFailure) backoff(retryDelay time.Duration) time.Duration {
	d := 10 * time.Millisecond << min(f.n-1, 10)
	return min(d, retryDelay)
}

// error reports the failure that ended a Take: as is for a call that did
// not wait, with the failures in a row and the wait for one that did.
func (f *storeFailure) error(lock string, now time.Time, waited time.Duration, waits bool) error {
	if !waits {
		return fmt.Errorf("lock %s: acquire: %w", lock, f.last)
	}
	if f.n == 1 {
		return fmt.Errorf("lock %s: acquire: the store failed and the wait ended after %v; check that the store is reachable: %w",
			lock, waited.Round(time.Millisecond), f.last)
	}
	return fmt.Errorf("lock %s: acquire: the store failed %s in a row over %v and the wait ended after %v; check that the store is reachable; last error: %w",
		lock, plural(f.n, "time", "times"), now.Sub(f.since).Round(time.Millisecond), waited.Round(time.Millisecond), f.last)
}

// plural writes a count with its noun: "1 try", "2 tries".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// Release gives back the hold token names. A token that holds nothing any
// more (released, expired, never taken) fails with ErrNotHeld; a token of
// another namespace with ErrWrongNamespace; nothing changes then.
func (l *Locker) Release(ctx context.Context, token string) error {
	t, err := l.parse(token)
	if err != nil {
		return err
	}
	k := Key{Namespace: l.ns, Name: t.name}
	ok, err := l.store.Release(ctx, k, t.slot, t.secret)
	l.forget(t.name, token)
	if err != nil {
		return fmt.Errorf("lock %s: release: %w", quoteLock(l.ns, t.name), err)
	}
	if !ok {
		return fmt.Errorf("lock %s: release: %w: the hold ended before (released, or its TTL passed)", quoteLock(l.ns, t.name), ErrNotHeld)
	}
	return nil
}

// ReleaseName gives back every hold this locker took on name and has not
// released. It fails with ErrNotHeld when the locker took none, or when
// every one of them had already ended.
func (l *Locker) ReleaseName(ctx context.Context, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	l.mu.Lock()
	l.reap()
	tokens := make([]string, 0, len(l.held[name]))
	for tok := range l.held[name] {
		tokens = append(tokens, tok)
	}
	l.mu.Unlock()
	if len(tokens) == 0 {
		return fmt.Errorf("lock %s: release: %w: this locker holds no place on it", quoteLock(l.ns, name), ErrNotHeld)
	}
	var live bool
	var errs []error
	for _, tok := range tokens {
		err := l.Release(ctx, tok)
		switch {
		case err == nil:
			live = true
		case !errors.Is(err, ErrNotHeld):
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if !live {
		return fmt.Errorf("lock %s: release: %w: every hold of this locker had ended (its TTL passed)", quoteLock(l.ns, name), ErrNotHeld)
	}
	return nil
}

// Extend makes the hold token names last ttl from now (zero means
// DefaultTTL), keeping its place, slot and fence. It never waits and never
// takes a new place: it answers at once. A hold that has ended (released, or
// its TTL passed, so another may hold the place now) fails with ErrNotHeld,
// an error and not a false answer as Take gives, because the caller believed
// it held the lock and must stop the work it guards; take the lock anew.
func (l *Locker) Extend(ctx context.Context, token string, ttl time.Duration) (Hold, error) {
	t, err := l.parse(token)
	if err != nil {
		return Hold{}, err
	}
	switch {
	case ttl < 0 || (ttl > 0 && ttl < time.Millisecond):
		return Hold{}, fmt.Errorf("%w: lock %s: extend: ttl is %v; give at least 1ms (stores keep milliseconds), or zero for the default 30s", ErrInvalid, quoteLock(l.ns, t.name), ttl)
	case ttl == 0:
		ttl = DefaultTTL
	}
	k := Key{Namespace: l.ns, Name: t.name}
	asked := l.clock.Now()
	g, err := l.store.Extend(ctx, k, t.slot, t.secret, ttl)
	if err != nil {
		return Hold{}, fmt.Errorf("lock %s: extend: %w", quoteLock(l.ns, k.Name), err)
	}
	if !g.Acquired {
		l.forget(k.Name, token)
		return Hold{}, fmt.Errorf("lock %s: extend: %w: the hold ended before (released, or its TTL passed); take the lock anew", quoteLock(l.ns, k.Name), ErrNotHeld)
	}
	g.Slot = t.slot
	h := l.hold(k, g, t.secret, asked)
	l.remember(h)
	return h, nil
}

func (l *Locker) hold(k Key, g Grant, secret string, asked time.Time) Hold {
	return Hold{
		Namespace: k.Namespace, Name: k.Name, Slot: g.Slot, Fence: g.Fence,
		Token:   makeToken(k, g.Slot, secret),
		Expires: asked.Add(g.TTL),
	}
}

// remember keeps a hold for ReleaseName until its expiry (or, when it is
// already remembered, moves its expiry: an extension).
func (l *Locker) remember(h Hold) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reap()
	at := h.Expires.Add(heldGrace)
	set := l.held[h.Name]
	if e := set[h.Token]; e != nil {
		l.ends.move(e, at)
		return
	}
	if set == nil {
		set = map[string]*expiry[heldToken]{}
		l.held[h.Name] = set
	}
	set[h.Token] = l.ends.push(heldToken{h.Name, h.Token}, at)
}

func (l *Locker) forget(name, token string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reap()
	if e := l.held[name][token]; e != nil {
		l.ends.remove(e)
		l.drop(heldToken{name, token})
	}
}

// reap forgets the holds past their expiry and heldGrace. l.mu is held.
func (l *Locker) reap() {
	now := l.clock.Now()
	for {
		t, ok := l.ends.popEnded(now)
		if !ok {
			return
		}
		l.drop(t)
	}
}

// drop forgets a hold whose heap entry is gone. l.mu is held.
func (l *Locker) drop(t heldToken) {
	set := l.held[t.name]
	delete(set, t.token)
	if len(set) == 0 {
		delete(l.held, t.name)
	}
}

// checkName refuses names no store keeps alike: empty, too long, with a NUL
// byte (Postgres text refuses it) or not UTF-8 (Postgres refuses it; the
// other stores would keep bytes Postgres cannot).
func checkName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty lock name; name the resource the lock guards", ErrInvalid)
	case len(name) > MaxName:
		return fmt.Errorf("%w: lock name %.32q... is %d bytes, more than %d; shorten it or hash it", ErrInvalid, name, len(name), MaxName)
	}
	return checkText("lock name", name)
}

func checkText(what, s string) error {
	switch {
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%w: %s %q holds a NUL byte, which no store keeps alike; leave it out or encode the name (hex, base64)", ErrInvalid, what, s)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s %q is not valid UTF-8, which no store keeps alike; encode the name (hex, base64)", ErrInvalid, what, s)
	}
	return nil
}

func quoteLock(ns, name string) string {
	if ns == "" {
		return strconv.Quote(name)
	}
	return strconv.Quote(ns + "/" + name)
}

// A token is "v1.<namespace>.<name>.<slot>.<secret>", namespace and name in
// unpadded base64url: release and extension find the place by its key alone.
type token struct {
	ns, name string
	slot     int
	secret   string
}

func makeToken(k Key, slot int, secret string) string {
	enc := base64.RawURLEncoding
	return "v1." + enc.EncodeToString([]byte(k.Namespace)) + "." + enc.EncodeToString([]byte(k.Name)) + "." + strconv.Itoa(slot) + "." + secret
}

func (l *Locker) parse(s string) (token, error) {
	bad := fmt.Errorf("%w: %q is not a lock token; pass Hold.Token as Take returned it", ErrInvalid, s)
	parts := strings.Split(s, ".")
	if len(parts) != 5 || parts[0] != "v1" {
		return token{}, bad
	}
	enc := base64.RawURLEncoding
	ns, err1 := enc.DecodeString(parts[1])
	name, err2 := enc.DecodeString(parts[2])
	slot, err3 := strconv.Atoi(parts[3])
	if err1 != nil || err2 != nil || err3 != nil || slot < 0 || slot >= HoldersLimit || len(parts[4]) != 32 || checkName(string(name)) != nil {
		return token{}, bad
	}
	if string(ns) != l.ns {
		return token{}, fmt.Errorf("lock %q: %w: the token was taken in namespace %q, this locker's is %q; use that namespace's locker",
			name, ErrWrongNamespace, ns, l.ns)
	}
	return token{ns: string(ns), name: string(name), slot: slot, secret: parts[4]}, nil
}

func newSecret() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
