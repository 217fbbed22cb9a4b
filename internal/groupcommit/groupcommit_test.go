package groupcommit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// recorder is a flush that keeps every batch it was given, fails the
// requests flagged to fail, and can be held at its start.
type recorder struct {
	mu      sync.Mutex
	batches [][]int
	gate    chan struct{} // when set, each flush waits for a value
	entered chan int      // when set, gets each batch's size as it starts
	inFlush int
	overlap bool
}

var errOdd = errors.New("odd request")

func (r *recorder) flush(batch []int, errs []error) {
	r.mu.Lock()
	r.inFlush++
	r.overlap = r.overlap || r.inFlush > 1
	r.batches = append(r.batches, append([]int(nil), batch...))
	r.mu.Unlock()
	if r.entered != nil {
		r.entered <- len(batch)
	}
	if r.gate != nil {
		<-r.gate
	}
	for i, v := range batch {
		if v%2 == 1 {
			errs[i] = fmt.Errorf("request %d: %w", v, errOdd)
		}
	}
	r.mu.Lock()
	r.inFlush--
	r.mu.Unlock()
}

// Many callers at once: each learns its own result, every request is
// flushed exactly once, flushes never overlap, and requests share them.
func TestEachCallerLearnsItsOwnResult(t *testing.T) {
	r := &recorder{}
	c := New(Config[int]{Flush: r.flush, Max: 50})
	const n = 2000
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.Do(context.Background(), i)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if odd := i%2 == 1; odd != errors.Is(err, errOdd) || (odd && err.Error() != fmt.Sprintf("request %d: odd request", i)) {
			t.Fatalf("request %d: got %v", i, err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := make(map[int]int)
	for _, b := range r.batches {
		if len(b) > 50 {
			t.Errorf("a flush took %d requests, more than Max 50", len(b))
		}
		for _, v := range b {
			seen[v]++
		}
	}
	for i := range n {
		if seen[i] != 1 {
			t.Fatalf("request %d flushed %d times", i, seen[i])
		}
	}
	if r.overlap {
		t.Error("two flushes ran at once")
	}
	t.Logf("%d requests in %d flushes", n, len(r.batches))
}

// Requests that come while a flush is in flight all go in the next one.
func TestQueuedWhileFlushingShareTheNext(t *testing.T) {
	r := &recorder{gate: make(chan struct{}), entered: make(chan int, 10)}
	c := New(Config[int]{Flush: r.flush})
	results := make(chan error, 4)
	do := func(v int) { go func() { results <- c.Do(context.Background(), v) }() }
	do(0)
	if got := <-r.entered; got != 1 {
		t.Fatalf("first flush took %d, want 1", got)
	}
	do(2)
	do(4)
	do(6)
	waitFor(t, "three requests to queue", func() bool { return c.Queued() == 3 })
	r.gate <- struct{}{}
	if got := <-r.entered; got != 3 {
		t.Fatalf("second flush took %d, want the 3 queued", got)
	}
	r.gate <- struct{}{}
	for range 4 {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
}

// A flush that fails fails each of its callers, and the next flush runs.
func TestFailingFlush(t *testing.T) {
	boom := errors.New("connection reset")
	fail := true
	c := New(Config[int]{Flush: func(batch []int, errs []error) {
		for i := range errs {
			if fail {
				errs[i] = boom
			}
		}
		fail = false
	}})
	if err := c.Do(context.Background(), 1); !errors.Is(err, boom) {
		t.Fatalf("first: %v, want the flush's error", err)
	}
	if err := c.Do(context.Background(), 2); err != nil {
		t.Fatalf("after a failed flush: %v", err)
	}
}

// While more requests are expected the first lingers for them; once none
// is (they came, or were dropped) it goes at once.
func TestLingerWhileExpected(t *testing.T) {
	r := &recorder{entered: make(chan int, 10)}
	c := New(Config[int]{Flush: r.flush, Linger: time.Hour})
	c.Expect(3)
	done := make(chan string, 3)
	c.Submit(0, func(err error) { done <- "0" })
	c.Submit(2, func(err error) { done <- "2" })
	select {
	case n := <-r.entered:
		t.Fatalf("a flush of %d ran while a request was still expected", n)
	case <-time.After(50 * time.Millisecond):
	}
	if c.Expected() != 1 {
		t.Fatalf("Expected = %d, want 1", c.Expected())
	}
	c.Drop()
	if got := <-r.entered; got != 2 {
		t.Fatalf("flush took %d, want both", got)
	}
	<-done
	<-done
	// Nothing expected: a lone request is flushed without lingering.
	c.Submit(4, func(err error) { done <- "4" })
	if got := <-r.entered; got != 1 {
		t.Fatalf("flush took %d, want 1", got)
	}
	<-done
}

// A caller whose context ends stops waiting; its request is still flushed.
func TestDoContextEnds(t *testing.T) {
	r := &recorder{gate: make(chan struct{}), entered: make(chan int, 1)}
	c := New(Config[int]{Flush: r.flush})
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() { res <- c.Do(ctx, 0) }()
	<-r.entered
	cancel()
	if err := <-res; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	r.gate <- struct{}{}
	waitFor(t, "the flush to end", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.inFlush == 0
	})
}

// Rest is called once the queue is empty, and the goroutine ends after
// Idle (goleak in TestMain fails the run if it does not).
func TestRestAndIdle(t *testing.T) {
	rested := make(chan struct{}, 10)
	c := New(Config[int]{Flush: func([]int, []error) {}, Idle: 10 * time.Millisecond,
		Rest: func() { rested <- struct{}{} }})
	if err := c.Do(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	<-rested
	waitFor(t, "the goroutine to end", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return !c.running
	})
	if err := c.Do(context.Background(), 2); err != nil {
		t.Fatalf("after the goroutine ended: %v", err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// With two flushers, a second flush starts beside a slow one only once a
// whole batch waits, takes exactly that batch, and no third starts.
func TestSecondFlushTakesAWholeBatch(t *testing.T) {
	r := &recorder{gate: make(chan struct{}), entered: make(chan int, 8)}
	c := New(Config[int]{Flush: r.flush, Max: 4, Flushers: func() int { return 2 }})
	results := make(chan error, 20)
	submit := func(v int) { c.Submit(v, func(err error) { results <- err }) }
	submit(0)
	if n := <-r.entered; n != 1 {
		t.Fatalf("the first flush took %d requests, want 1", n)
	}
	for v := 2; v < 8; v += 2 { // three: less than a batch
		submit(v)
	}
	select {
	case n := <-r.entered:
		t.Fatalf("a flush of %d started beside the first before a whole batch waited", n)
	case <-time.After(50 * time.Millisecond):
	}
	submit(8) // the fourth: a whole batch
	if n := <-r.entered; n != 4 {
		t.Fatalf("the second flush took %d requests, want a whole batch of 4", n)
	}
	for v := 10; v < 18; v += 2 { // another whole batch, with two in flight
		submit(v)
	}
	select {
	case n := <-r.entered:
		t.Fatalf("a third flush of %d started while two were in flight", n)
	case <-time.After(50 * time.Millisecond):
	}
	close(r.gate)
	for range 9 {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	t.Logf("batches: %v", r.batches)
	if !r.overlap {
		t.Error("no two flushes overlapped")
	}
}
