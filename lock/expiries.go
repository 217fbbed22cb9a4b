package lock

import (
	"container/heap"
	"time"
)

// expiries orders entries by when they end, so the state of ended holds can
// go the moment a call notices their time has passed: a min-heap whose
// entries know their index, for removal and change in O(log n).
type expiries[T any] struct {
	h expiryHeap[T]
}

// expiry is one entry: a payload and when it ends.
type expiry[T any] struct {
	v     T
	at    time.Time
	index int
}

func (e *expiries[T]) push(v T, at time.Time) *expiry[T] {
	x := &expiry[T]{v: v, at: at}
	heap.Push(&e.h, x)
	return x
}

func (e *expiries[T]) remove(x *expiry[T]) {
	if x.index >= 0 {
		heap.Remove(&e.h, x.index)
	}
}

func (e *expiries[T]) move(x *expiry[T], at time.Time) {
	x.at = at
	heap.Fix(&e.h, x.index)
}

// popEnded removes and returns, one by one, the entries ended at now.
func (e *expiries[T]) popEnded(now time.Time) (T, bool) {
	if len(e.h) == 0 || e.h[0].at.After(now) {
		var zero T
		return zero, false
	}
	return heap.Pop(&e.h).(*expiry[T]).v, true
}

func (e *expiries[T]) len() int { return len(e.h) }

type expiryHeap[T any] []*expiry[T]

func (h expiryHeap[T]) Len() int           { return len(h) }
func (h expiryHeap[T]) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h expiryHeap[T]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *expiryHeap[T]) Push(x any) {
	e := x.(*expiry[T])
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *expiryHeap[T]) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.index = -1
	return e
}
