package ledger

import (
	"container/heap"
	"time"
)

// minHeap is a binary min-heap of T ordered by less, on container/heap.
type minHeap[T any] struct {
	items []T
	less  func(a, b T) bool
}

func newMinHeap[T any](less func(a, b T) bool) *minHeap[T] { return &minHeap[T]{less: less} }

// Len, Less, Swap, Push and Pop implement heap.Interface; use push, pop and peek.
func (h *minHeap[T]) Len() int           { return len(h.items) }
func (h *minHeap[T]) Less(i, j int) bool { return h.less(h.items[i], h.items[j]) }
func (h *minHeap[T]) Swap(i, j int)      { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *minHeap[T]) Push(x any)         { h.items = append(h.items, x.(T)) }
func (h *minHeap[T]) Pop() any {
	n := len(h.items) - 1
	x := h.items[n]
	h.items = h.items[:n]
	return x
}

func (h *minHeap[T]) push(v T) { heap.Push(h, v) }
func (h *minHeap[T]) pop() T   { return heap.Pop(h).(T) }

// peek returns the smallest item; the heap must not be empty.
func (h *minHeap[T]) peek() T { return h.items[0] }

// expiry is when a reservation, by its id hash, stops counting.
type expiry struct {
	at   time.Time
	hash uint64
}
