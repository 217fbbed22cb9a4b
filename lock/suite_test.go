package lock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/lock"
)

// A backend opens stores for one test. open returns a function that makes
// a store over its own connections (its own pool or client) to the one
// shared place the test's locks live in.
type backend struct {
	name string
	open func(t testing.TB) func(t testing.TB) lock.Store
	// proxied, for stores behind a network, opens two stores on one place:
	// the first direct, the second through a proxy the test can cut.
	proxied func(t testing.TB) (direct, cut lock.Store, p *proxy)
}

// runSuite runs the conformance suite against every backend.
func runSuite(t *testing.T, b backend) {
	tests := []struct {
		name string
		fn   func(t *testing.T, newStore func(t testing.TB) lock.Store)
	}{
		{"Mutex", testMutex},
		{"ThreeAtATime", testThreeAtATime},
		{"ConcurrentFreePlaces", testConcurrentFreePlaces},
		{"Reclaimed", testReclaimed},
		{"WaiterPastWait", testWaiterPastWait},
		{"CrashedHolder", testCrashedHolder},
		{"Extension", testExtension},
		{"FenceGrows", testFenceGrows},
		{"Namespaces", testNamespaces},
		{"BadInput", testBadInput},
		{"ReleaseName", testReleaseName},
		{"Cancel", testCancel},
	}
	for _, tc := range tests {
		t.Run(b.name+"/"+tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, b.open(t))
		})
	}
	if b.proxied != nil {
		t.Run(b.name+"/RidesOutCut", func(t *testing.T) {
			t.Parallel()
			testRidesOutCut(t, b.proxied)
		})
	}
}

func locker(t *testing.T, s lock.Store, ns string) *lock.Locker {
	t.Helper()
	l, err := lock.New(s, lock.Namespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func mustTake(t *testing.T, l *lock.Locker, name string, opts ...lock.TakeOption) lock.Hold {
	t.Helper()
	h, ok, err := l.Take(ctxT(t), name, opts...)
	if err != nil || !ok {
		t.Fatalf("take %q: ok=%v err=%v", name, ok, err)
	}
	return h
}

func mustNotTake(t *testing.T, l *lock.Locker, name string, opts ...lock.TakeOption) {
	t.Helper()
	h, ok, err := l.Take(ctxT(t), name, opts...)
	if err != nil || ok {
		t.Fatalf("take %q should find it held: ok=%v err=%v hold=%+v", name, ok, err, h)
	}
}

// 50 goroutines over 3 lockers with separate connections increment a
// counter under the lock: no lost update, never two holders, and the fence
// of each acquisition is above every fence before it.
func testMutex(t *testing.T, newStore func(t testing.TB) lock.Store) {
	ctx := ctxT(t)
	var lockers []*lock.Locker
	for range 3 {
		lockers = append(lockers, locker(t, newStore(t), "mutex"))
	}
	var (
		counter   int // guarded by the lock under test alone
		holders   atomic.Int32
		maxSeen   atomic.Int32
		lastFence int64 // guarded by the lock under test alone
		fenceErr  atomic.Value
	)
	const n = 50
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := lockers[i%3]
			h, ok, err := l.Take(ctx, "counter", lock.TTL(30*time.Second), lock.Wait(time.Minute), lock.RetryDelay(2*time.Second))
			if err != nil || !ok {
				errs <- fmt.Errorf("goroutine %d: ok=%v err=%v", i, ok, err)
				return
			}
			if c := holders.Add(1); c > maxSeen.Load() {
				maxSeen.Store(c)
			}
			if h.Fence <= lastFence {
				fenceErr.Store(fmt.Sprintf("fence %d after %d", h.Fence, lastFence))
			}
			lastFence = h.Fence
			v := counter
			time.Sleep(time.Millisecond) // widen the window a lost update needs
			counter = v + 1
			holders.Add(-1)
			if err := l.Release(ctx, h.Token); err != nil {
				errs <- fmt.Errorf("goroutine %d: release: %w", i, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if counter != n {
		t.Errorf("counter = %d after %d locked increments: an update was lost", counter, n)
	}
	if m := maxSeen.Load(); m != 1 {
		t.Errorf("%d holders at once on a mutex", m)
	}
	if v := fenceErr.Load(); v != nil {
		t.Errorf("fence did not grow: %v", v)
	}
	t.Logf("%d locked increments over 3 lockers in %v", n, time.Since(start))
}

// Six callers on MaxHolders 3: three hold at once, three wait; each release
// hands its place to a waiter at once (well under RetryDelay), never more
// than three at once.
func testThreeAtATime(t *testing.T, newStore func(t testing.TB) lock.Store) {
	ctx := ctxT(t)
	const retry = 20 * time.Second // a waiter that needed its retry delay would fail the test
	opts := []lock.TakeOption{lock.MaxHolders(3), lock.TTL(time.Minute), lock.Wait(time.Minute), lock.RetryDelay(retry)}
	failed := make(chan struct{}, 100)
	lockers := []*lock.Locker{locker(t, &observed{newStore(t), failed, nil}, "sem"), locker(t, &observed{newStore(t), failed, nil}, "sem")}
	type in struct {
		who  int
		at   time.Time
		hold lock.Hold
	}
	ins := make(chan in, 6)
	release := make([]chan struct{}, 6)
	var inside, maxInside atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for i := range 6 {
		release[i] = make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := lockers[i%2]
			h, ok, err := l.Take(ctx, "payments", opts...)
			if err != nil || !ok {
				errs <- fmt.Errorf("caller %d: ok=%v err=%v", i, ok, err)
				return
			}
			if c := inside.Add(1); c > maxInside.Load() {
				maxInside.Store(c)
			}
			ins <- in{i, time.Now(), h}
			<-release[i]
			inside.Add(-1)
			if err := l.Release(ctx, h.Token); err != nil {
				errs <- fmt.Errorf("caller %d: release: %w", i, err)
			}
		}()
	}
	recv := func() in {
		select {
		case x := <-ins:
			return x
		case err := <-errs:
			t.Fatal(err)
		case <-time.After(retry / 2):
			t.Fatalf("no caller took a place within %v", retry/2)
		}
		return in{}
	}
	var holding []in
	for range 3 {
		holding = append(holding, recv())
	}
	slots := map[int]bool{}
	for _, h := range holding {
		slots[h.hold.Slot] = true
	}
	if len(slots) != 3 {
		t.Fatalf("three holders share slots: %+v", holding)
	}
	// The other three are waiting: each found every place held, and a
	// fourth place is not to be had.
	for range 3 {
		recv2(t, failed, "a waiter's failed try")
	}
	mustNotTake(t, locker(t, newStore(t), "sem"), "payments", lock.MaxHolders(3))
	select {
	case x := <-ins:
		t.Fatalf("a fourth caller (%d) got in while three held", x.who)
	default:
	}
	var lat []time.Duration
	for len(holding) > 0 {
		h := holding[0]
		holding = holding[1:]
		at := time.Now()
		close(release[h.who])
		if len(lat) < 3 {
			next := recv()
			lat = append(lat, next.at.Sub(at))
			holding = append(holding, next)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if m := maxInside.Load(); m != 3 {
		t.Errorf("max holders at once = %d, want 3", m)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	t.Logf("release to waiter: %v (RetryDelay %v)", lat, retry)
	if lat[len(lat)-1] > 3*time.Second {
		t.Errorf("a waiter took %v to take a freed place; a wake should hand it over well under the %v retry delay", lat[len(lat)-1], retry)
	}
}

// A waiter past its Wait gets false, or ErrNotAcquired with MustAcquire.
func testWaiterPastWait(t *testing.T, newStore func(t testing.TB) lock.Store) {
	ctx := ctxT(t)
	s := newStore(t)
	a, b := locker(t, s, "wait"), locker(t, newStore(t), "wait")
	mustTake(t, a, "report", lock.TTL(time.Minute))
	const wait = 300 * time.Millisecond
	start := time.Now()
	_, ok, err := b.Take(ctx, "report", lock.Wait(wait), lock.RetryDelay(100*time.Millisecond))
	waited := time.Since(start)
	if err != nil || ok {
		t.Fatalf("take past wait: ok=%v err=%v", ok, err)
	}
	if waited < wait {
		t.Fatalf("gave up after %v, before its wait of %v", waited, wait)
	}
	t.Logf("gave up after %v (wait %v)", waited, wait)
	_, ok, err = b.Take(ctx, "report", lock.Wait(wait), lock.MustAcquire())
	if ok || !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("MustAcquire: ok=%v err=%v, want ErrNotAcquired", ok, err)
	}
	var na *lock.NotAcquiredError
	if !errors.As(err, &na) || na.Name != "report" || na.Namespace != "wait" || na.Waited < wait {
		t.Fatalf("error %v does not name the lock and its wait: %+v", err, na)
	}
	if !strings.Contains(err.Error(), "wait/report") {
		t.Errorf("error text %q does not name the lock", err)
	}
	// One try, one place: the error counts them in words that read.
	_, _, err = b.Take(ctx, "report", lock.MustAcquire())
	if err == nil || !strings.Contains(err.Error(), "after 1 try in") || !strings.Contains(err.Error(), "its one place is held") {
		t.Errorf("error of one try on a mutex: %v", err)
	}
	// Tries alone bounds a wait too.
	_, ok, err = b.Take(ctx, "report", lock.Tries(3), lock.RetryDelay(10*time.Millisecond), lock.MustAcquire())
	if ok || !errors.As(err, &na) || na.Tries != 3 {
		t.Fatalf("Tries 3: ok=%v err=%v", ok, err)
	}
}

// A holder that never releases blocks the others only until its TTL; then
// its release and extension fail.
func testCrashedHolder(t *testing.T, newStore func(t testing.TB) lock.Store) {
	ctx := ctxT(t)
	crashed, next := locker(t, newStore(t), "crash"), locker(t, newStore(t), "crash")
	const ttl = 500 * time.Millisecond
	start := time.Now()
	h := mustTake(t, crashed, "job", lock.TTL(ttl))
	// A retry delay far beyond the TTL: the waiter must wake at the expiry.
	got, ok, err := next.Take(ctx, "job", lock.Wait(time.Minute), lock.RetryDelay(30*time.Second))
	took := time.Since(start)
	if err != nil || !ok {
		t.Fatalf("take after the crashed holder's TTL: ok=%v err=%v", ok, err)
	}
	t.Logf("crashed holder's TTL %v; next holder in after %v", ttl, took)
	if took < ttl-50*time.Millisecond {
		t.Fatalf("took the place after %v, before the holder's TTL of %v", took, ttl)
	}
	if took > ttl+5*time.Second {
		t.Fatalf("took the place %v after the start: the waiter did not wake at the holder's expiry", took)
	}
	if got.Fence <= h.Fence {
		t.Errorf("fence %d after %d", got.Fence, h.Fence)
	}
	if err := crashed.Release(ctx, h.Token); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("release by the expired holder: %v, want ErrNotHeld", err)
	}
	if _, err := crashed.Extend(ctx, h.Token, time.Minute); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("extension by the expired holder: %v, want ErrNotHeld", err)
	}
	// Its failed release changed nothing: the place is still the next's.
	mustNotTake(t, crashed, "job")
	if err := next.Release(ctx, got.Token); err != nil {
		t.Fatal(err)
	}
}

// Extend keeps the place past the first TTL, with the same fence; it fails
// on a hold that has ended.
func testExtension(t *testing.T, newStore func(t testing.TB) lock.Store) {
	ctx := ctxT(t)
	a, b := locker(t, newStore(t), "ext"), locker(t, newStore(t), "ext")
	// Long enough that a loaded machine extends the hold before it ends.
	const ttl = 2 * time.Second
	h := mustTake(t, a, "batch", lock.TTL(ttl))
	e, err := a.Extend(ctx, h.Token, time.Minute)
	if err != nil {
		t.Fatalf("extend: %v", err)
	}
	if e.Fence != h.Fence || e.Token != h.Token || e.Slot != h.Slot {
		t.Errorf("extension changed the hold: %+v -> %+v", h, e)
	}
	if !e.Expires.After(h.Expires) {
		t.Errorf("extended hold expires %v, not after %v", e.Expires, h.Expires)
	}
	// Wait three first TTLs: the extended hold still keeps the place.
	start := time.Now()
	_, ok, err := b.Take(ctx, "batch", lock.Wait(3*ttl), lock.RetryDelay(50*time.Millisecond))
	if err != nil || ok {
		t.Fatalf("took the place %v after its hold was extended: ok=%v err=%v", time.Since(start), ok, err)
	}
	if err := a.Release(ctx, h.Token); err != nil {
		t.Fatalf("release of the extended hold: %v", err)
	}
	// A released hold cannot be extended, nor can a hold with a bad TTL.
	if _, err := a.Extend(ctx, h.Token, time.Minute); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("extension of a released hold: %v, want ErrNotHeld", err)
	}
	h2 := mustTake(t, a, "other")
	if _, err := a.Extend(ctx, h2.Token, -time.Second); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("extension with a negative TTL: %v, want ErrInvalid", err)
	}
}

// The fencing number grows with each new acquisition, across lockers and
// slots, never with an extension.
func testFenceGrows(t *testing.T, newStore func(t testing.TB) lock.Store) {
	ctx := ctxT(t)
	ls := []*lock.Locker{locker(t, newStore(t), "fence"), locker(t, newStore(t), "fence")}
	var last int64
	for i := range 6 {
		l := ls[i%2]
		h := mustTake(t, l, "row", lock.MaxHolders(2))
		if h.Fence <= last {
			t.Fatalf("acquisition %d: fence %d after %d", i, h.Fence, last)
		}
		last = h.Fence
		e, err := l.Extend(ctx, h.Token, 0)
		if err != nil || e.Fence != h.Fence {
			t.Fatalf("extension: fence %d -> %d, err %v", h.Fence, e.Fence, err)
		}
		if i%3 != 2 { // sometimes keep the place, so slots differ
			if err := l.Release(ctx, h.Token); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// Two namespaces never meet: the same name is held in each, and a token of
// one is refused by the other without changing anything.
func testNamespaces(t *testing.T, newStore func(t testing.TB) lock.Store) {
	ctx := ctxT(t)
	s := newStore(t)
	a, b := locker(t, s, "tenant-a"), locker(t, newStore(t), "tenant-b")
	ha := mustTake(t, a, "order:7")
	hb := mustTake(t, b, "order:7")
	if err := b.Release(ctx, ha.Token); !errors.Is(err, lock.ErrWrongNamespace) {
		t.Fatalf("release in b with a's token: %v, want ErrWrongNamespace", err)
	}
	if _, err := b.Extend(ctx, ha.Token, 0); !errors.Is(err, lock.ErrWrongNamespace) {
		t.Fatalf("extension in b with a's token: %v, want ErrWrongNamespace", err)
	}
	mustNotTake(t, locker(t, newStore(t), "tenant-a"), "order:7")
	if err := a.Release(ctx, ha.Token); err != nil {
		t.Fatal(err)
	}
	mustNotTake(t, locker(t, s, "tenant-b"), "order:7")
	if err := b.Release(ctx, hb.Token); err != nil {
		t.Fatal(err)
	}
}

// Bad input gets a clear error and changes nothing.
func testBadInput(t *testing.T, newStore func(t testing.TB) lock.Store) {
	ctx := ctxT(t)
	l := locker(t, newStore(t), "bad")
	h := mustTake(t, l, "held")
	for _, tc := range []struct {
		name string
		o    lock.TakeOption
		want string
	}{
		{"", nil, "empty lock name"},
		{strings.Repeat("x", lock.MaxName+1), nil, "more than 255"},
		{"held", lock.TTL(-time.Second), "TTL(-1s)"},
		{"held", lock.MaxHolders(-1), "MaxHolders(-1)"},
		{"held", lock.Wait(-1), "Wait(-1ns)"},
		{"a\x00b", nil, "NUL byte"},
		{"caf\xe9", nil, "not valid UTF-8"},
	} {
		_, ok, err := l.Take(ctx, tc.name, tc.o)
		if ok || !errors.Is(err, lock.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("take %.20q: ok=%v err=%v, want ErrInvalid naming %q", tc.name, ok, err, tc.want)
		}
	}
	// A well-formed token that was never taken.
	forged := h.Token[:len(h.Token)-32] + strings.Repeat("0", 32)
	if err := l.Release(ctx, forged); !errors.Is(err, lock.ErrNotHeld) || !strings.Contains(err.Error(), `"bad/held"`) {
		t.Errorf("release with an unknown token: %v", err)
	}
	if err := l.Release(ctx, "v1.x"); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("release with a malformed token: %v", err)
	}
	if _, err := l.Extend(ctx, "nonsense", 0); !errors.Is(err, lock.ErrInvalid) || !strings.Contains(err.Error(), "not a lock token") {
		t.Errorf("extension with a malformed token: %v", err)
	}
	// Nothing changed: the hold is still there, and still releases once.
	mustNotTake(t, locker(t, newStore(t), "bad"), "held")
	if err := l.Release(ctx, h.Token); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx, h.Token); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("second release: %v, want ErrNotHeld", err)
	}
	if _, err := lock.New(newStore(t), lock.Namespace(strings.Repeat("n", lock.MaxName+1))); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("overlong namespace: %v", err)
	}
	for _, ns := range []string{"a\x00b", "\xff"} {
		if _, err := lock.New(newStore(t), lock.Namespace(ns)); !errors.Is(err, lock.ErrInvalid) {
			t.Errorf("namespace %q: %v, want ErrInvalid", ns, err)
		}
	}
}

// Release by name gives back this locker's holds, and only those.
func testReleaseName(t *testing.T, newStore func(t testing.TB) lock.Store) {
	ctx := ctxT(t)
	a, b := locker(t, newStore(t), "byname"), locker(t, newStore(t), "byname")
	mustTake(t, a, "k", lock.MaxHolders(3))
	mustTake(t, a, "k", lock.MaxHolders(3))
	hb := mustTake(t, b, "k", lock.MaxHolders(3))
	if err := a.ReleaseName(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	h1 := mustTake(t, a, "k", lock.MaxHolders(3))
	h2 := mustTake(t, a, "k", lock.MaxHolders(3))
	mustNotTake(t, a, "k", lock.MaxHolders(3)) // b's hold survived
	for _, tok := range []string{h1.Token, h2.Token, hb.Token} {
		if err := map[bool]*lock.Locker{true: b, false: a}[tok == hb.Token].Release(ctx, tok); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.ReleaseName(ctx, "k"); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("release by name with nothing held: %v", err)
	}
}

// A waiting Take ends with its context.
func testCancel(t *testing.T, newStore func(t testing.TB) lock.Store) {
	a, b := locker(t, newStore(t), "cancel"), locker(t, newStore(t), "cancel")
	mustTake(t, a, "k")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, _, err := b.Take(ctx, "k", lock.Wait(time.Hour), lock.RetryDelay(time.Hour))
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled take: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a cancelled take still waits after 10s")
	}
}

func recv2(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(30 * time.Second):
		t.Fatalf("no %s within 30s", what)
	}
}

// N takers on N stores of their own (their own pools or clients), released
// together by a barrier, on a name with N free places and no wait: every one
// gets a place in its one try, round after round, each on a slot of its own.
func testConcurrentFreePlaces(t *testing.T, newStore func(t testing.TB) lock.Store) {
	ctx := ctxT(t)
	for _, n := range []int{3, 6} {
		lockers := make([]*lock.Locker, n)
		for i := range lockers {
			lockers[i] = locker(t, newStore(t), "free")
		}
		const rounds = 20
		short := 0
		for r := range rounds {
			name := fmt.Sprintf("n%d-round%d", n, r)
			holds := make([]lock.Hold, n)
			errs := make([]error, n)
			var ready, wg sync.WaitGroup
			start := make(chan struct{})
			ready.Add(n)
			wg.Add(n)
			for i, l := range lockers {
				go func() {
					defer wg.Done()
					ready.Done()
					<-start
					h, ok, err := l.Take(ctx, name, lock.MaxHolders(n), lock.TTL(time.Minute))
					if err == nil && !ok {
						err = errors.New("no place")
					}
					holds[i], errs[i] = h, err
				}()
			}
			ready.Wait()
			close(start)
			wg.Wait()
			slots := map[int]bool{}
			got := 0
			for i, err := range errs {
				if err != nil {
					t.Logf("%d takers, round %d, taker %d: %v", n, r, i, err)
					continue
				}
				got++
				if slots[holds[i].Slot] {
					t.Fatalf("%d takers, round %d: slot %d given twice", n, r, holds[i].Slot)
				}
				slots[holds[i].Slot] = true
			}
			if got < n {
				short++
			}
			for i, err := range errs {
				if err == nil {
					if err := lockers[i].Release(ctx, holds[i].Token); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		if short > 0 {
			t.Errorf("%d takers on %d free places: %d of %d rounds left a taker without a place", n, n, short, rounds)
		}
	}
}

// Released and expired holds leave at most 1% of their state behind: in the
// store (rows, keys, map entries) and in the locker's memory of its holds.
// LOCK_RECLAIM_NAMES sets the names of each kind (default 1000; the issue's
// figure, 20000, is measured in BENCHMARKS.md).
func testReclaimed(t *testing.T, newStore func(t testing.TB) lock.Store) {
	n := 1000
	if v, err := strconv.Atoi(os.Getenv("LOCK_RECLAIM_NAMES")); err == nil && v > 0 {
		n = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute+time.Duration(n)*20*time.Millisecond)
	defer cancel()
	s := newStore(t)
	l := locker(t, s, "reclaim")
	start := time.Now()
	const ttl = 200 * time.Millisecond
	// Four callers at a time; a take waits (and so rides out a store that
	// restarts meanwhile), a release tries again after an error.
	work := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var last time.Time
	var failures []error
	for range 4 {
		wg.Go(func() {
			for i := range work {
				name, o := fmt.Sprintf("released-%d", i), lock.TTL(time.Minute)
				if i >= n {
					name, o = fmt.Sprintf("expired-%d", i-n), lock.TTL(ttl)
				}
				h, ok, err := l.Take(ctx, name, o, lock.Wait(time.Minute))
				if err == nil && !ok {
					err = fmt.Errorf("take %q: no place", name)
				}
				for try := 0; err == nil && i < n; try++ {
					if err = l.Release(ctx, h.Token); err == nil || try == 5 || errors.Is(err, lock.ErrNotHeld) {
						break
					}
					time.Sleep(200 * time.Millisecond) // a store restarting: try the release again
				}
				mu.Lock()
				if err != nil {
					failures = append(failures, err)
				}
				if i >= n {
					last = time.Now()
				}
				mu.Unlock()
			}
		})
	}
	for i := range 2 * n {
		work <- i
	}
	close(work)
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d takes or releases failed, the first: %v", len(failures), failures[0])
	}
	took := time.Since(start)
	before, err := lock.Leftover(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	heldBefore := lock.HeldTokens(l)
	// Past every expiry and the locker's second of grace, one more call
	// lets memory and the locker notice; the SQL stores' sweep runs on its
	// own every 100ms here.
	time.Sleep(time.Until(last.Add(ttl + time.Second + 10*time.Millisecond)))
	h := mustTake(t, l, "poke")
	if err := l.Release(ctx, h.Token); err != nil {
		t.Fatal(err)
	}
	bound := 2 * n / 100
	var left, held int
	deadline := time.Now().Add(30 * time.Second)
	for {
		left, err = lock.Leftover(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		held = lock.HeldTokens(l)
		if (left <= bound && held <= bound) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // polls the store's own sweep
	}
	t.Logf("%d names taken and released, %d taken and left to expire, in %v: store kept %d, locker %d before the expiry; %d and %d %v after it (bound %d)",
		n, n, took.Round(time.Millisecond), before, heldBefore, left, held, time.Since(last).Round(time.Millisecond), bound)
	if left > bound || held > bound {
		t.Errorf("after %d released and %d expired holds the store keeps %d entries and the locker %d tokens; want at most %d (1%%)", n, n, left, held, bound)
	}
}

// A waiting Take rides out a cut of its store's connections: with Wait 20s
// it takes the place once the cut is over and the holder releases. A take
// whose wait ends while the store still fails says so, after its wait.
func testRidesOutCut(t *testing.T, open func(t testing.TB) (lock.Store, lock.Store, *proxy)) {
	ctx := ctxT(t)
	direct, cut, p := open(t)
	failed, errs := make(chan struct{}, 100), make(chan error, 100)
	holder, waiter := locker(t, direct, "cut"), locker(t, &observed{cut, failed, errs}, "cut")
	h := mustTake(t, holder, "k", lock.TTL(time.Minute))
	type result struct {
		ok  bool
		err error
	}
	done := make(chan result, 1)
	go func() {
		_, ok, err := waiter.Take(ctx, "k", lock.Wait(20*time.Second), lock.RetryDelay(100*time.Millisecond))
		done <- result{ok, err}
	}()
	recv2(t, failed, "failed try of the waiter")
	const outage = time.Second
	p.cut(outage)
	var first error
	select {
	case first = <-errs:
	case r := <-done:
		t.Fatalf("the waiter ended during the cut: ok=%v err=%v", r.ok, r.err)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter's store saw no error from the cut")
	}
	time.Sleep(outage) // the rest of the cut: the waiter retries against it
	if err := holder.Release(ctx, h.Token); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil || !r.ok {
			t.Fatalf("after a %v cut (first error: %v) the waiter with Wait 20s: ok=%v err=%v", outage, first, r.ok, r.err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the waiter did not take the place within 15s of the cut's end")
	}
	t.Logf("rode out a %v cut; first error: %v", outage, first)

	// A wait that ends while the store still fails reports the failure, at
	// the end of its wait and not at the first error.
	mustTake(t, holder, "k2", lock.TTL(time.Minute))
	p.cut(time.Hour)
	const wait = 500 * time.Millisecond
	start := time.Now()
	_, ok, err := waiter.Take(ctx, "k2", lock.Wait(wait), lock.RetryDelay(50*time.Millisecond))
	took := time.Since(start)
	if ok || err == nil || errors.Is(err, lock.ErrNotAcquired) || !strings.Contains(err.Error(), "store failed") {
		t.Fatalf("take with the store down: ok=%v err=%v, want the store's failure", ok, err)
	}
	if took < wait {
		t.Fatalf("take with the store down gave up after %v, before its wait of %v", took, wait)
	}
	t.Logf("store down through a wait of %v: %v after %v", wait, err, took.Round(time.Millisecond))
	p.cut(0)
}
