package strategy

import (
	"fmt"
	"sync"
)

// The seat sequence: bases first in annotation order, then weighted seats by the
// Sainte-Laguë (Webster) rule, ties to the later term. The target for N pods is the
// first N seats, so growing N never moves an earlier seat (house monotonicity), and a
// ReplicaSet that removes the highest seats first shrinks to the exact target.

// Sequence yields the seat sequence of a strategy one seat at a time. It is cheap to
// create; it is not safe for concurrent use.
type Sequence struct {
	terms    []Term
	term     int   // term whose base is being filled; len(terms) once bases are done
	used     int   // seats of terms[term]'s base handed out so far
	weighted []int // weighted seats handed out per term (bases not counted)
}

// Sequence starts the seat sequence at seat 1.
func (s *Strategy) Sequence() *Sequence {
	return &Sequence{terms: s.Terms, weighted: make([]int, len(s.Terms))}
}

// Next returns the 0-based term index of the next seat.
func (q *Sequence) Next() int {
	for q.term < len(q.terms) {
		if q.used < q.terms[q.term].Base {
			q.used++
			return q.term
		}
		q.term, q.used = q.term+1, 0
	}
	// Largest weight/(2s+1); compared by cross-multiplication so it is exact, and with
	// >= so that a tie goes to the later term.
	best := -1
	for i, t := range q.terms {
		if t.Weight == 0 {
			continue
		}
		if best < 0 || t.Weight*(2*q.weighted[best]+1) >= q.terms[best].Weight*(2*q.weighted[i]+1) {
			best = i
		}
	}
	if best < 0 {
		// Parse refuses strategies whose weights are all zero; a hand-built one past its
		// bases has no seat to give, so stay on the last term rather than panic.
		return len(q.terms) - 1
	}
	q.weighted[best]++
	return best
}

// Seats returns the term index of seats 1..n, in order. It walks the sequence, so it
// costs O(n × terms): for the target of n pods use Target, for one seat TermOfSeat.
func (s *Strategy) Seats(n int) []int {
	if n <= 0 || len(s.Terms) == 0 {
		return nil
	}
	seq, out := s.Sequence(), make([]int, n)
	for i := range out {
		out[i] = seq.Next()
	}
	return out
}

// The fast path. The weighted part of the sequence is the merge of each term's quotient
// list w/1, w/3, w/5, ... ordered by quotient, largest first, ties to the later term.
// So the position of term t's j-th weighted seat (its rank) is j plus, for every other
// term, how many of its quotients come before w_t/(2j+1): a count in integers, O(terms).
// The rank grows with j, so how many weighted seats a term holds among the first k is
// found by binary search over j: O(terms² × log k) for a seat or a target, worst case.

// rank returns the 0-based position, among the weighted seats, of term t's weighted
// seat j (0-based). Requires terms[t].Weight > 0 and j >= 0. All in int64: weights are
// at most MaxWeight and j at most MaxSeat, so no product overflows.
func rank(terms []Term, t int, j int64) int64 {
	wt, odd := int64(terms[t].Weight), 2*j+1
	r := j
	for i, term := range terms {
		if i == t || term.Weight == 0 {
			continue
		}
		// Term i's seat j' comes first when w_i/(2j'+1) > w_t/(2j+1), or equal and i is
		// later: (2j'+1) × w_t < x, or <= x, with x = w_i × (2j+1).
		x := int64(term.Weight) * odd
		if i < t {
			x-- // strict: ties go to the later term, t
		}
		// Odd numbers 1, 3, ... up to floor(x / w_t).
		r += (x/wt + 1) / 2
	}
	return r
}

// weightedHeld returns how many of the first k weighted seats term t holds: the
// number of j with rank(t, j) < k.
func weightedHeld(terms []Term, t int, k int64) int64 {
	if terms[t].Weight == 0 || k <= 0 {
		return 0
	}
	// rank(t, j) >= j, so the answer is at most k.
	lo, hi := int64(0), k // rank(t, j) < k for every j < lo; rank(t, hi) >= k
	for lo < hi {
		mid := lo + (hi-lo)/2
		if rank(terms, t, mid) < k {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// Target returns how many of n pods each term holds, in annotation order.
// O(terms² × log n), whatever n is; n above MaxSeat is counted as MaxSeat.
func (s *Strategy) Target(n int) []int {
	counts := make([]int, len(s.Terms))
	if n <= 0 || len(s.Terms) == 0 {
		return counts
	}
	n = min(n, MaxSeat)
	left := n
	for i, t := range s.Terms {
		take := min(t.Base, left)
		counts[i], left = take, left-take
	}
	if left == 0 || s.totalWeight() == 0 {
		if left > 0 {
			counts[len(counts)-1] += left // as Sequence does for a hand-built, weightless strategy
		}
		return counts
	}
	for i := range s.Terms {
		counts[i] += int(weightedHeld(s.Terms, i, int64(left)))
	}
	return counts
}

// SeatError is returned for a seat outside 1..MaxSeat.
type SeatError struct {
	Seat int
}

func (e *SeatError) Error() string {
	return fmt.Sprintf("seat %d is outside 1..%d", e.Seat, MaxSeat)
}

// TermAt returns the 0-based index of the term that owns seat (1-based), or a
// *SeatError when seat is outside 1..MaxSeat, or an error for a strategy with no terms.
// The index it returns is always a valid index into s.Terms. O(terms² × log seat)
// worst case; O(1) amortized for the low seats of a strategy from Parse (cached).
func (s *Strategy) TermAt(seat int) (int, error) {
	if seat < 1 || seat > MaxSeat {
		return 0, &SeatError{Seat: seat}
	}
	if len(s.Terms) == 0 {
		return 0, fmt.Errorf("strategy has no terms")
	}
	if s.prefix != nil {
		if term, ok := s.prefix.lookup(s, seat); ok {
			return term, nil
		}
	}
	return s.termAt(seat), nil
}

// termAt computes the term of a seat in 1..MaxSeat of a strategy with terms.
func (s *Strategy) termAt(seat int) int {
	left := seat
	for i, t := range s.Terms {
		if left <= t.Base {
			return i
		}
		left -= t.Base
	}
	if s.totalWeight() == 0 {
		return len(s.Terms) - 1 // as Sequence does for a hand-built, weightless strategy
	}
	// Weighted seat k (0-based) belongs to the term whose seat j has rank k; that j
	// can only be the number of the term's seats ranked before k.
	k := int64(left - 1)
	for i, t := range s.Terms {
		if t.Weight > 0 && rank(s.Terms, i, weightedHeld(s.Terms, i, k)) == k {
			return i
		}
	}
	return len(s.Terms) - 1 // unreachable: exactly one term holds weighted seat k
}

// TermOfSeat returns the 0-based index of the term that owns seat (1-based), and -1
// for a seat outside 1..MaxSeat or a strategy with no terms. Callers that index
// s.Terms with a seat they did not produce themselves should use TermAt, whose error
// cannot be ignored by accident.
func (s *Strategy) TermOfSeat(seat int) int {
	term, err := s.TermAt(seat)
	if err != nil {
		return -1
	}
	return term
}

// LowestFreeSeat returns the smallest seat number (1-based) not in held. A new pod takes
// it, so a replacement for a lost pod lands on the seat, and term, the lost one had.
func LowestFreeSeat(held map[int]bool) int {
	seat := 1
	for held[seat] {
		seat++
	}
	return seat
}

// prefixLimit bounds the seats whose terms a parsed strategy caches: one byte each
// (terms fit in a byte: at most MaxTerms), so at most 4 KiB per strategy. Real
// workloads live well below it; higher seats are computed.
const prefixLimit = 4096

// prefixCache holds the terms of the first seats of a parsed strategy, grown by
// doubling as higher seats are asked for, so a strategy kept by a parse cache answers
// the seats of ordinary workloads in O(1) amortized. Safe for concurrent use.
type prefixCache struct {
	mu    sync.RWMutex
	terms []uint8
}

// lookup returns the term of seat from the cache, growing it when seat is within
// prefixLimit; ok is false above the limit.
func (c *prefixCache) lookup(s *Strategy, seat int) (term int, ok bool) {
	if seat > prefixLimit || len(s.Terms) > 256 {
		return 0, false
	}
	c.mu.RLock()
	if seat <= len(c.terms) {
		term = int(c.terms[seat-1])
		c.mu.RUnlock()
		return term, true
	}
	c.mu.RUnlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if seat > len(c.terms) {
		size := min(max(64, 2*len(c.terms), seat), prefixLimit)
		grown := make([]uint8, size)
		seq := s.Sequence()
		for i := range grown {
			grown[i] = uint8(seq.Next())
		}
		c.terms = grown
	}
	return int(c.terms[seat-1]), true
}
