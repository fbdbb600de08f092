package webhook

// What one replica knows of a revision's seats: the seats taken by visible pods and
// live reservations, the lowest free one, and who owns the revision.

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
)

// revState is what one replica knows of a revision. taken counts, per seat, the visible
// pods holding it plus the live reservations on it; the lowest free seat is the top of
// free (seats freed below low) or else the first untaken seat from low, so a claim
// costs O(log N) amortized, never a copy of the held seats.
type revState struct {
	rev Revision

	// The newest version of the record this replica knows (nil: none exists), and when
	// this replica first saw its holder and renew time: another holder's ownership is
	// judged by this replica's clock, as client-go's leader election does.
	record   *coordinationv1.Lease
	rv       uint64
	observed time.Time
	// ownedUntil is when this replica stops answering claims as the owner, unless a
	// renewal lands first; renewedAt is the start of its last landed ownership write.
	ownedUntil time.Time
	renewedAt  time.Time
	term       time.Duration // the ownership duration of this replica's last landed write
	writing    *ownershipWrite
	// mark is the highest seat this replica may hand out as the owner: the mark of its
	// last landed write, and while a write is in flight no more than that write's
	// (pendingMark), so that every seat answered is listed in, or below the mark of,
	// the record another replica would take over. block is how far ahead of the lowest
	// free seat the last write set it; claimsSinceWrite sizes the next block.
	mark, pendingMark int
	block             int
	claimsSinceWrite  int
	// phantomUntil and phantomMark: after taking over a record whose holder did not
	// release it, a seat up to phantomMark that a pod gives up before phantomUntil is
	// held too (this replica's pod informer may show that pod's end before the pod the
	// crashed owner gave the seat to).
	phantomUntil time.Time
	phantomMark  int
	// goneHolder is a holder found gone (ownerGone) since goneSince.
	goneHolder string
	goneSince  time.Time

	// reserved holds this replica's reservations (its own, and those it took over),
	// by id hash; open counts those whose pod is not seen yet (counted).
	reserved map[uint64]*entry
	open     int
	// unfulfilled counts the counted reservations that expire (the ledger's metric).
	unfulfilled prometheus.Counter
	expiries    *minHeap[expiry]
	// fulfilled holds the reservation ids whose pod this replica has seen, so that a
	// reservation taken over from a record after its pod was seen does not count.
	fulfilled  *recentIDs
	lastFulfil time.Time

	pods map[types.UID]int // visible pod -> the seat it holds

	taken  map[int]int
	free   *minHeap[int]
	inFree map[int]bool
	low    int
}

type entry struct {
	seat    int
	expires time.Time
	counted bool
	// claims counts the attempts holding the reservation: the API server may call again
	// with the same admission UID while an earlier attempt is still running, and the
	// release of the attempt it abandoned must not free the retry's seat.
	claims int
}

// ownershipWrite is one write of a revision's record by this replica (taking it,
// renewing it); err is set before done is closed.
type ownershipWrite struct {
	done chan struct{}
	err  error
}

// state returns the revision's state, creating it.
func (l *SeatLedger) state(rev Revision) *revState {
	s := l.revs[rev]
	if s == nil {
		s = &revState{
			rev: rev, reserved: map[uint64]*entry{},
			fulfilled: newRecentIDs(),
			pods:      map[types.UID]int{}, taken: map[int]int{}, inFree: map[int]bool{}, low: 1,
			free:     newMinHeap(func(a, b int) bool { return a < b }),
			expiries: newMinHeap(func(a, b expiry) bool { return a.at.Before(b.at) }),
		}
		if l.metrics != nil {
			s.unfulfilled = l.metrics.unfulfilled
		}
		l.revs[rev] = s
	}
	return s
}

// forget drops a revision's state once it holds nothing.
func (l *SeatLedger) forget(s *revState) {
	now := l.clock.Now()
	s.expire(now)
	s.shrink()
	if now.After(s.lastFulfil.Add(2*l.ttl)) && s.record == nil && s.writing == nil && len(s.pods) == 0 && s.liveReservations(now) == 0 {
		delete(l.revs, s.rev)
	}
}

// shrink gives back the room a burst's reservations took once they are all gone: Go
// maps and slices keep their largest size, so the owner of a revision would otherwise
// hold the burst's high-water mark (about 0.5 KiB per claim) for the revision's life.
func (s *revState) shrink() {
	if len(s.reserved) == 0 && s.expiries.Len() == 0 {
		s.reserved = map[uint64]*entry{}
		s.expiries.items = nil
	}
	if s.fulfilled.len() == 0 {
		s.fulfilled = newRecentIDs()
	}
}

func (s *revState) take(seat int) { s.taken[seat]++ }

// count makes reservation e hold its seat until its pod is seen (uncount).
func (s *revState) count(e *entry) {
	e.counted = true
	s.open++
	s.take(e.seat)
}

func (s *revState) uncount(e *entry) {
	e.counted = false
	s.open--
	s.untake(e.seat)
}

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

// expire stops counting the reservations that expired by now, and forgets them.
func (s *revState) expire(now time.Time) {
	s.fulfilled.expire(now)
	for s.expiries.Len() > 0 && !s.expiries.peek().at.After(now) {
		x := s.expiries.pop()
		e := s.reserved[x.hash]
		if e == nil || e.expires.After(now) {
			continue
		}
		if e.counted {
			s.uncount(e)
			if s.unfulfilled != nil && x.hash != phantomHash(e.seat) {
				s.unfulfilled.Inc()
			}
		}
		delete(s.reserved, x.hash)
	}
}

// liveReservations counts the reservations not expired by now (fulfilled ones too: they
// stay in the record until they expire, for a replica whose pod informer lags).
func (s *revState) liveReservations(now time.Time) int {
	s.expire(now)
	return len(s.reserved)
}

// answerLimit is the highest seat the owner may hand out now (mark).
func (s *revState) answerLimit() int {
	if s.pendingMark > 0 {
		return min(s.mark, s.pendingMark)
	}
	return s.mark
}

// reserve hands out the lowest free seat for the admission hash, the same one again to
// a retried admission. errBeyondMark: the seat is above the mark, and a write must
// raise it first.
func (l *SeatLedger) reserve(s *revState, hash uint64, now time.Time) (int, error) {
	if e := s.reserved[hash]; e != nil && now.Before(e.expires) {
		e.claims++
		return e.seat, nil
	}
	// Only reservations whose pod is not seen yet count against the cap: a revision
	// may admit any number of pods, as long as they keep showing up.
	if s.expire(now); s.open >= maxReservations {
		return 0, ErrRecordFull
	}
	seat := s.lowest(now)
	if seat > s.answerLimit() {
		return 0, errBeyondMark
	}
	l.hold(s, hash, &entry{seat: seat, expires: now.Add(l.ttl), claims: 1})
	s.claimsSinceWrite++
	return seat, nil
}

// hold adds reservation e (counted unless its pod was seen already).
func (l *SeatLedger) hold(s *revState, hash uint64, e *entry) {
	if old := s.reserved[hash]; old != nil && old.counted {
		s.uncount(old)
	}
	if !s.fulfilled.has(hash, l.clock.Now()) {
		s.count(e)
	}
	s.reserved[hash] = e
	s.expiries.push(expiry{at: e.expires, hash: hash})
}

// dropPhantom ends the hold on seat taken over from a crashed owner: a pod holds it.
func (s *revState) dropPhantom(seat int) {
	h := phantomHash(seat)
	if e := s.reserved[h]; e != nil {
		if e.counted {
			s.uncount(e)
		}
		delete(s.reserved, h)
	}
}

// unreserve gives back one attempt's claim of the reservation of admission hash; once
// no attempt holds it, it goes and its seat is free at once.
func (l *SeatLedger) unreserve(s *revState, hash uint64) {
	if e := s.reserved[hash]; e != nil {
		if e.claims--; e.claims > 0 {
			return
		}
		if e.counted {
			s.uncount(e)
		}
		delete(s.reserved, hash)
	}
}

// fulfil records that the pod of reservation hash is visible: the pod, not the
// reservation, holds the seat from now on.
func (l *SeatLedger) fulfil(s *revState, hash uint64) {
	now := l.clock.Now()
	s.fulfilled.add(hash, now, now.Add(2*l.ttl))
	s.lastFulfil = now
	if e := s.reserved[hash]; e != nil && e.counted {
		s.uncount(e)
	}
}
