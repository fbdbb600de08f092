package ledger

// What one replica knows of a revision's seats: the seats taken by visible pods and
// live reservations, the lowest free one, and who owns the revision.

import (
	"container/heap"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
)

// revState is what one replica knows of a revision.
type revState struct {
	rev clusterview.Revision

	// The newest record known (nil: none), and when this replica first saw its holder
	// and renew time: ownership is judged by this replica's clock, as in client-go.
	record   *coordinationv1.Lease
	rv       uint64
	observed time.Time
	// ownedUntil ends this replica's answers as owner; renewedAt starts its last write.
	ownedUntil time.Time
	renewedAt  time.Time
	term       time.Duration // the ownership duration of this replica's last landed write
	writing    *ownershipWrite
	// goneHolder is a holder found gone (ownerMissed) since goneSince.
	goneHolder string
	goneSince  time.Time
	// successor (at successorPeer) is who this stopping replica handed the revision to
	// (transfer) until a newer record shows; handedBy is who handed it to this one
	// (succeed): its record is this replica's to write.
	successor, successorPeer string
	handedBy                 string

	// reserved holds this replica's reservations by id hash; open counts those whose
	// pod is not seen yet.
	reserved map[uint64]*entry
	open     int
	// unfulfilled counts the counted reservations that expire (the ledger's metric).
	unfulfilled prometheus.Counter
	expiries    *minHeap[expiry]

	pods  map[types.UID]podSeat // visible pods
	seats seatSet
}

// podSeat is the seat a visible pod holds and the hash of its reservation id (0: none).
type podSeat struct {
	seat int
	hash uint64
}

// seatSet counts the visible pods and live reservations per seat. The lowest free seat
// is the top of free (seats freed below low) or the first untaken from low: O(log N).
type seatSet struct {
	taken  map[int]int
	free   *minHeap[int]
	inFree map[int]bool
	low    int
}

func newSeatSet() seatSet {
	return seatSet{taken: map[int]int{}, inFree: map[int]bool{}, low: 1, free: newMinHeap(func(a, b int) bool { return a < b })}
}

func (t *seatSet) take(seat int) { t.taken[seat]++ }

func (t *seatSet) untake(seat int) {
	if t.taken[seat]--; t.taken[seat] > 0 {
		return
	}
	delete(t.taken, seat)
	if seat < t.low && !t.inFree[seat] {
		t.free.push(seat)
		t.inFree[seat] = true
	}
}

// lowest returns the lowest free seat, dropping stale entries of free on the way.
func (t *seatSet) lowest() int {
	for t.free.Len() > 0 {
		top := t.free.peek()
		if t.taken[top] == 0 {
			return top
		}
		t.free.pop()
		delete(t.inFree, top)
	}
	for t.taken[t.low] > 0 {
		t.low++
	}
	return t.low
}

type entry struct {
	seat    int
	expires time.Time
	counted bool
	// claims counts the attempts holding it: the release of an attempt the API server
	// abandoned must not free its retry's seat.
	claims int
}

// ownershipWrite is one write of a revision's record; err is set before done closes.
type ownershipWrite struct {
	done chan struct{}
	err  error
}

// forget drops a revision's state once it holds nothing.
func (l *Ledger) forget(s *revState) {
	now := l.clock.Now()
	s.expire(now)
	s.shrink()
	if s.record == nil && s.writing == nil && len(s.pods) == 0 && len(s.reserved) == 0 {
		delete(l.revs, s.rev)
	}
}

// shrink gives back a burst's room once its reservations are gone (Go maps never shrink).
func (s *revState) shrink() {
	if len(s.reserved) == 0 && s.expiries.Len() == 0 {
		s.reserved = map[uint64]*entry{}
		s.expiries.items = nil
	}
}

// count makes reservation e hold its seat until its pod is seen (uncount).
func (s *revState) count(e *entry) {
	e.counted = true
	s.open++
	s.seats.take(e.seat)
}

func (s *revState) uncount(e *entry) {
	e.counted = false
	s.open--
	s.seats.untake(e.seat)
}

// lowest returns the lowest free seat at now.
func (s *revState) lowest(now time.Time) int {
	s.expire(now)
	return s.seats.lowest()
}

// expire stops counting the reservations that expired by now, and forgets them.
func (s *revState) expire(now time.Time) {
	for s.expiries.Len() > 0 && !s.expiries.peek().at.After(now) {
		x := s.expiries.pop()
		e := s.reserved[x.hash]
		if e == nil || e.expires.After(now) {
			continue
		}
		if e.counted {
			s.uncount(e)
			if s.unfulfilled != nil {
				s.unfulfilled.Inc()
			}
		}
		delete(s.reserved, x.hash)
	}
}

// reserve hands out the lowest free seat for the admission hash, the same one again to
// a retried admission.
func (l *Ledger) reserve(s *revState, hash uint64, now time.Time) int {
	if e := s.reserved[hash]; e != nil && now.Before(e.expires) {
		e.claims++
		return e.seat
	}
	s.expire(now)
	// Only reservations whose pod is not seen yet count against the record's cap; at
	// the cap the oldest gives way rather than a pod going unplaced.
	l.displaceOldest(s, s.open-maxReservations+1)
	seat := s.lowest(now)
	l.hold(s, hash, &entry{seat: seat, expires: now.Add(l.cfg.ReservationTTL), claims: 1})
	return seat
}

// hold adds reservation e, holding its seat until its pod is seen.
func (l *Ledger) hold(s *revState, hash uint64, e *entry) {
	if old := s.reserved[hash]; old != nil && old.counted {
		s.uncount(old)
	}
	s.count(e)
	s.reserved[hash] = e
	s.expiries.push(expiry{at: e.expires, hash: hash})
}

// displaceOldest drops up to n reservations whose pod is not seen yet, oldest first;
// their seats are free at once. It scans the reservations, only at the record's cap.
func (l *Ledger) displaceOldest(s *revState, n int) {
	for ; n > 0; n-- {
		var oldest *entry
		var hash uint64
		for h, e := range s.reserved {
			if e.counted && (oldest == nil || e.expires.Before(oldest.expires)) {
				oldest, hash = e, h
			}
		}
		if oldest == nil {
			return
		}
		s.remove(hash, oldest)
		l.metrics.displaced.Inc()
	}
}

// unreserve gives back one attempt's claim of a reservation; the last frees its seat.
func (l *Ledger) unreserve(s *revState, hash uint64) {
	if e := s.reserved[hash]; e != nil {
		if e.claims--; e.claims > 0 {
			return
		}
		s.remove(hash, e)
	}
}

// remove drops reservation e (of id hash): its seat, if it held one, is free at once.
func (s *revState) remove(hash uint64, e *entry) {
	if e.counted {
		s.uncount(e)
	}
	delete(s.reserved, hash)
}

// minHeap is a binary min-heap of T ordered by less, on container/heap.
type minHeap[T any] struct {
	items []T
	less  func(a, b T) bool
}

func newMinHeap[T any](less func(a, b T) bool) *minHeap[T] { return &minHeap[T]{less: less} }

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
