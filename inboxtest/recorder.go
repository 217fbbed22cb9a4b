package inboxtest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
)

// Handling is one run of a handler on one row.
type Handling struct {
	ID       int64
	Instance string // the name given to Wrap
	// Start and End are read from the host's clock, even when the service
	// runs on a fake one, which stands still while handlers run: they order
	// handlings in real time. End is zero while the handler runs.
	Start, End time.Time
	Err        error // what the handler returned; a panic becomes an error
	// Outcome is how the subscription settled it, from its Observe events:
	// "" until settled, and always "" without Recorder.Observe.
	Outcome inbox.Outcome
	Attempt int // from the event; 0 without Recorder.Observe
}

func (h Handling) String() string {
	s := fmt.Sprintf("id %d on %q", h.ID, h.Instance)
	if h.Attempt > 0 {
		s += fmt.Sprintf(" attempt %d", h.Attempt)
	}
	switch {
	case h.End.IsZero():
		s += ": running"
	case h.Outcome != "":
		s += ": " + string(h.Outcome)
	default:
		s += ": returned"
	}
	if h.Err != nil {
		s += fmt.Sprintf(" (%v)", h.Err)
	}
	return s
}

// Overlap is two handlings of one row that ran at the same time: the row
// was held twice at once.
type Overlap struct {
	First, Second Handling
}

func (o Overlap) String() string {
	return fmt.Sprintf("id %d held twice at once: %v, and %v from %v into it", o.First.ID, o.First, o.Second, o.Second.Start.Sub(o.First.Start))
}

// Recorder records every handling of the rows of one queue by the handlers
// it wraps, on any number of instances, so a test can wait for handlings and
// assert each row was handled exactly once and never by two at once.
//
//	rec := inboxtest.NewRecorder(t, b, queue)
//	inbox.Handle(svc, queue, rec.Wrap("a", handle), rec.Observe("a"))
//	...
//	rec.WaitHandled(id)
//	rec.ExactlyOnce(ids...)
type Recorder[T any] struct {
	t testing.TB
	b *inbox.Broker
	q inbox.Queue[T]

	mu       sync.Mutex
	all      []Handling
	running  map[int64][]int // indexes into all of handlings of an id now running
	overlaps [][2]int
	observed map[string]bool // instances whose settlements the recorder observes
	changed  chan struct{}   // closed and replaced on every change
	// returned is, per id, the index into all of the handling the last
	// WaitHandled or WaitNextHandled returned: where WaitNextHandled goes on.
	returned map[int64]int
}

// NewRecorder makes a recorder of handlings of q. b is any broker on the
// database: waits that fail read q's table through it to say what is left.
func NewRecorder[T any](t testing.TB, b *inbox.Broker, q inbox.Queue[T]) *Recorder[T] {
	t.Helper()
	if q.Roles() == nil {
		t.Fatalf("inboxtest: zero Queue: make it with inbox.NewQueue")
	}
	return &Recorder[T]{t: t, b: b, q: q, running: map[int64][]int{}, observed: map[string]bool{}, changed: make(chan struct{}), returned: map[int64]int{}}
}

// Wrap returns h recording each of its runs as a handling on instance.
func (r *Recorder[T]) Wrap(instance string, h inbox.Handler[T]) inbox.Handler[T] {
	return func(ctx context.Context, row T) (err error) {
		id := r.id(row)
		i := r.begin(instance, id)
		defer func() {
			p := recover()
			if p != nil {
				err = fmt.Errorf("panic: %v", p)
			}
			r.end(i, err)
			if p != nil {
				panic(p)
			}
		}()
		return h(ctx, row)
	}
}

// Observe is the subscription option that tells the recorder how the
// subscription on instance settled each handling (acked, retried, parked,
// lost...). With it, waits count a handling of instance once it is
// settled, not merely returned.
func (r *Recorder[T]) Observe(instance string) inbox.SubOption {
	r.mu.Lock()
	r.observed[instance] = true
	r.mu.Unlock()
	return inbox.Observe(func(ev inbox.Event) {
		if ev.Outcome == inbox.Released {
			return // given back unstarted: no handler ran
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		for i := len(r.all) - 1; i >= 0; i-- {
			h := &r.all[i]
			if h.ID == ev.ID && h.Instance == instance && !h.End.IsZero() && h.Outcome == "" {
				h.Outcome, h.Attempt = ev.Outcome, ev.Attempt
				r.signal()
				return
			}
		}
	})
}

func (r *Recorder[T]) id(row T) int64 { return r.q.ID(row) }

func (r *Recorder[T]) begin(instance string, id int64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := len(r.all)
	r.all = append(r.all, Handling{ID: id, Instance: instance, Start: time.Now()})
	for _, j := range r.running[id] {
		r.overlaps = append(r.overlaps, [2]int{j, i})
	}
	r.running[id] = append(r.running[id], i)
	r.signal()
	return i
}

func (r *Recorder[T]) end(i int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := &r.all[i]
	h.End, h.Err = time.Now(), err
	run := r.running[h.ID]
	for k, j := range run {
		if j == i {
			run = append(run[:k], run[k+1:]...)
			break
		}
	}
	if len(run) == 0 {
		delete(r.running, h.ID)
	} else {
		r.running[h.ID] = run
	}
	r.signal()
}

func (r *Recorder[T]) signal() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// done says whether a handling counts as happened: it ended, and was
// settled when the recorder observes its instance's settlements. Callers
// hold r.mu.
func (r *Recorder[T]) done(h Handling) bool {
	return !h.End.IsZero() && (!r.observed[h.Instance] || h.Outcome != "")
}

// Handlings returns every handling so far, in the order they started.
func (r *Recorder[T]) Handlings() []Handling {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Handling(nil), r.all...)
}

// Count returns how many times row id was handled (runs that started).
func (r *Recorder[T]) Count(id int64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, h := range r.all {
		if h.ID == id {
			n++
		}
	}
	return n
}

// Counts returns how many times each row was handled.
func (r *Recorder[T]) Counts() map[int64]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[int64]int{}
	for _, h := range r.all {
		out[h.ID]++
	}
	return out
}

// Overlaps returns every pair of handlings of one row that ran at once.
func (r *Recorder[T]) Overlaps() []Overlap {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Overlap, 0, len(r.overlaps))
	for _, o := range r.overlaps {
		out = append(out, Overlap{First: r.all[o[0]], Second: r.all[o[1]]})
	}
	return out
}

// NoOverlaps fails the test if any row was held by two handlings at once.
func (r *Recorder[T]) NoOverlaps() {
	r.t.Helper()
	if ov := r.Overlaps(); len(ov) > 0 {
		lines := make([]string, len(ov))
		for i, o := range ov {
			lines[i] = "\n\t" + o.String()
		}
		r.t.Errorf("inboxtest: %d rows of %s held twice at once:%s", len(ov), queueName(r.q), strings.Join(lines, ""))
	}
}

// ExactlyOnce fails the test unless each of ids was handled exactly once,
// no other row was handled, and no row was held twice at once.
func (r *Recorder[T]) ExactlyOnce(ids ...int64) {
	r.t.Helper()
	counts := r.Counts()
	var bad []string
	for _, id := range ids {
		if n := counts[id]; n != 1 {
			bad = append(bad, fmt.Sprintf("id %d handled %d times", id, n))
		}
		delete(counts, id)
	}
	for id, n := range counts {
		bad = append(bad, fmt.Sprintf("id %d handled %d times, not expected at all", id, n))
	}
	if len(bad) > 0 {
		r.t.Errorf("inboxtest: not exactly once on %s: %s\nhandlings:%s", queueName(r.q), strings.Join(bad, "; "), r.describe())
	}
	r.NoOverlaps()
}

// WaitHandled waits until a handling of row id has happened (ended, and been
// settled when the recorder observes settlements) and returns the latest.
// After Timeout it fails the test listing the handlings so far and the rows
// left.
//
// Called again it returns at once with the handling it found before, or a
// later one: to wait for the row's next handling, as after a retry, use
// WaitNextHandled.
func (r *Recorder[T]) WaitHandled(id int64) Handling {
	r.t.Helper()
	var got Handling
	r.wait(fmt.Sprintf("a handling of id %d", id), func(all []Handling) bool {
		for i := len(all) - 1; i >= 0; i-- {
			if all[i].ID == id && r.done(all[i]) {
				got, r.returned[id] = all[i], i
				return true
			}
		}
		return false
	})
	return got
}

// WaitNextHandled waits for the handling of row id after the one the last
// WaitHandled or WaitNextHandled of id returned (the first handling of id
// when none did) to have happened, and returns it. Handlings are taken in
// the order they started, each once, so a handling that happened before the
// call is not missed:
//
//	rec.WaitHandled(id)              // attempt 1: retried after a second
//	run.Advance(time.Second)
//	second := rec.WaitNextHandled(id) // attempt 2
//
// After Timeout it fails the test listing the handlings so far and the rows
// left.
func (r *Recorder[T]) WaitNextHandled(id int64) Handling {
	r.t.Helper()
	r.mu.Lock()
	after, ok := r.returned[id]
	r.mu.Unlock()
	if !ok {
		after = -1
	}
	var got Handling
	r.wait(fmt.Sprintf("the handling of id %d after handling %d of it", id, r.ordinal(id, after)), func(all []Handling) bool {
		for i := after + 1; i < len(all); i++ {
			if all[i].ID != id {
				continue
			}
			if !r.done(all[i]) {
				return false
			}
			got, r.returned[id] = all[i], i
			return true
		}
		return false
	})
	return got
}

// ordinal is how many handlings of id started up to index i of all (0 for
// i < 0).
func (r *Recorder[T]) ordinal(id int64, i int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for j := 0; j <= i && j < len(r.all); j++ {
		if r.all[j].ID == id {
			n++
		}
	}
	return n
}

// WaitHandlings waits until n handlings in all have happened and returns
// them all. After Timeout it fails the test listing the handlings so far and
// the rows left.
func (r *Recorder[T]) WaitHandlings(n int) []Handling {
	r.t.Helper()
	return r.wait(fmt.Sprintf("%d handlings", n), func(all []Handling) bool {
		k := 0
		for _, h := range all {
			if r.done(h) {
				k++
			}
		}
		return k >= n
	})
}

// WaitDrained is WaitDrained on the recorder's queue.
func (r *Recorder[T]) WaitDrained() {
	r.t.Helper()
	WaitDrained(r.t, r.b, r.q)
}

func (r *Recorder[T]) wait(what string, cond func([]Handling) bool) []Handling {
	r.t.Helper()
	deadline := time.NewTimer(Timeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		ok := cond(r.all)
		all := append([]Handling(nil), r.all...)
		ch := r.changed
		r.mu.Unlock()
		if ok {
			return all
		}
		select {
		case <-ch:
		case <-deadline.C:
			left := "rows left unknown"
			if rows, err := readRows(r.b, r.q); err == nil {
				left = describeRows(rows)
			} else {
				left += ": " + err.Error()
			}
			r.t.Fatalf("inboxtest: waited %v for %s on %s; handlings so far:%s\n%s", Timeout, what, queueName(r.q), r.describe(), left)
		}
	}
}

// describe lists the handlings for a failure message, the last 30 in full.
func (r *Recorder[T]) describe() string {
	all := r.Handlings()
	if len(all) == 0 {
		return " none"
	}
	var b strings.Builder
	if len(all) > 30 {
		fmt.Fprintf(&b, "\n\t... %d before", len(all)-30)
		all = all[len(all)-30:]
	}
	for _, h := range all {
		b.WriteString("\n\t" + h.String())
	}
	return b.String()
}
