package webhook

// What one replica knows of a revision's seats: the seats taken by visible pods and
// live reservations, and the lowest free one.

import (
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/cache"
)

// revState is what one replica knows of a revision's seats. taken counts, per seat,
// the visible pods holding it plus the live reservations on it; the lowest free seat
// is the top of free (seats freed below low) or else the first untaken seat from low,
// so a claim costs O(log N) amortized, never a copy of the held seats.
type revState struct {
	rev Revision

	// The newest version of the record this replica knows (nil: none exists).
	record *coordinationv1.Lease
	rv     uint64
	// view holds the record's reservations by id hash.
	view map[uint64]*entry
	// tentative holds the seats of the batch being written, by id hash.
	tentative map[uint64]int
	expiries  *minHeap[expiry]
	// fulfilled holds the reservation ids whose pod this replica has seen; the state
	// is kept until the last of them is surely out of every record (lastFulfil).
	fulfilled  *cache.Expiring
	lastFulfil time.Time

	pods map[types.UID]int // visible pod -> the seat it holds

	taken  map[int]int
	free   *minHeap[int]
	inFree map[int]bool
	low    int

	queue   []*request
	writing bool
}

type entry struct {
	seat    int
	expires time.Time
	counted bool
}

type request struct {
	hash    uint64
	release bool
	seat    int
	err     error
	done    chan struct{}
}

// state returns the revision's state, creating it.
func (l *SeatLedger) state(rev Revision) *revState {
	s := l.revs[rev]
	if s == nil {
		s = &revState{
			rev: rev, view: map[uint64]*entry{}, tentative: map[uint64]int{},
			fulfilled: cache.NewExpiringWithClock(l.clock),
			pods:      map[types.UID]int{}, taken: map[int]int{}, inFree: map[int]bool{}, low: 1,
			free:     newMinHeap(func(a, b int) bool { return a < b }),
			expiries: newMinHeap(func(a, b expiry) bool { return a.at.Before(b.at) }),
		}
		l.revs[rev] = s
	}
	return s
}

// forget drops a revision's state once it holds nothing.
func (l *SeatLedger) forget(s *revState) {
	if l.clock.Now().After(s.lastFulfil.Add(2*l.ttl)) && s.record == nil && len(s.view) == 0 && len(s.tentative) == 0 && len(s.pods) == 0 && len(s.queue) == 0 && !s.writing {
		delete(l.revs, s.rev)
	}
}

func (s *revState) take(seat int) { s.taken[seat]++ }

func (s *revState) untake(seat int) {
	if s.taken[seat]--; s.taken[seat] > 0 {
		return
	}
	delete(s.taken, seat)
	if seat < s.low && !s.inFree[seat] {
		s.free.push(seat)
		s.inFree[seat] = true
	}
}

// lowest returns the lowest free seat. Every free seat below low is in free (stale
// entries, taken again since, are dropped on the way).
func (s *revState) lowest(now time.Time) int {
	s.expire(now)
	for s.free.Len() > 0 {
		top := s.free.peek()
		if s.taken[top] == 0 {
			return top
		}
		s.free.pop()
		delete(s.inFree, top)
	}
	for s.taken[s.low] > 0 {
		s.low++
	}
	return s.low
}

// expire stops counting the reservations that expired by now.
func (s *revState) expire(now time.Time) {
	for s.expiries.Len() > 0 && !s.expiries.peek().at.After(now) {
		x := s.expiries.pop()
		if e := s.view[x.hash]; e != nil && e.counted && !e.expires.After(now) {
			e.counted = false
			s.untake(e.seat)
		}
	}
}

// fulfil records that the pod of reservation hash is visible: the pod, not the
// reservation, holds the seat from now on.
func (l *SeatLedger) fulfil(s *revState, hash uint64) {
	s.fulfilled.Set(hash, struct{}{}, 2*l.ttl)
	s.lastFulfil = l.clock.Now()
	if e := s.view[hash]; e != nil && e.counted {
		e.counted = false
		s.untake(e.seat)
	}
}

func (s *revState) isFulfilled(hash uint64) bool {
	_, ok := s.fulfilled.Get(hash)
	return ok
}
