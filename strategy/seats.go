package strategy

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

// Seats returns the term index of seats 1..n, in order.
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

// Target returns how many of n pods each term holds, in annotation order.
func (s *Strategy) Target(n int) []int {
	counts := make([]int, len(s.Terms))
	for _, term := range s.Seats(n) {
		counts[term]++
	}
	return counts
}

// TermOfSeat returns the 0-based index of the term that owns seat (1-based). It returns
// -1 for a seat below 1 or a strategy with no terms.
func (s *Strategy) TermOfSeat(seat int) int {
	if seat < 1 || len(s.Terms) == 0 {
		return -1
	}
	seq := s.Sequence()
	term := 0
	for range seat {
		term = seq.Next()
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
