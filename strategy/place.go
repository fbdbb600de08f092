package strategy

// The fallback rule: while some terms are unavailable (their capacity cannot be had),
// the seats that belong to them are placed on the available terms. A seat keeps its
// number; only the term it is placed on changes. The fallback seats, counted in seat
// order, are shared among the available weighted terms by the same Sainte-Laguë rule,
// over their weights only (bases are not repeated), so the k-th fallback seat goes
// where the k-th seat of that smaller strategy goes; with no weighted term available,
// among the available terms with a base, by their bases. The rule is pure: the same
// strategy, seat count and unavailable set give the same placement everywhere.

// Placement says where the seats of a strategy are placed while some terms are
// unavailable.
type Placement struct {
	// Terms holds the 0-based term each seat 1..n is placed on (index seat-1).
	Terms []int
	// Own holds the 0-based term that owns each seat under the strategy.
	Own []int
	// Stuck is set when some seat's own term is unavailable and no term with a weight
	// or a base is available to take it: such seats stay on their own term.
	Stuck bool
}

// Fallback reports whether seat (1-based) is placed off its own term.
func (p Placement) Fallback(seat int) bool {
	return seat >= 1 && seat <= len(p.Terms) && p.Terms[seat-1] != p.Own[seat-1]
}

// Counts returns how many of the seats each term holds, in annotation order.
func (p Placement) Counts(terms int) []int {
	out := make([]int, terms)
	for _, t := range p.Terms {
		if t >= 0 && t < terms {
			out[t]++
		}
	}
	return out
}

// available returns the smaller strategy the fallback seats are shared by, and per
// term of it the index of the term in s: the available weighted terms, by their
// weights. When no weighted term is available, the available terms that carry a base
// take the seats, by their bases: the user chose that capacity for the workload, and
// Pending pods serve nobody (a strategy such as "on-demand,base=1:spot,weight=3" has
// only spot weighted). Only when neither is left does the fallback have nowhere to go.
func (s *Strategy) available(unavailable func(term int) bool) (*Strategy, []int) {
	sub := &Strategy{}
	var index []int
	for i, t := range s.Terms {
		if t.Weight > 0 && !unavailable(i) {
			sub.Terms = append(sub.Terms, Term{Labels: t.Labels, Weight: t.Weight})
			index = append(index, i)
		}
	}
	if len(sub.Terms) > 0 {
		return sub, index
	}
	for i, t := range s.Terms {
		if t.Base > 0 && !unavailable(i) {
			sub.Terms = append(sub.Terms, Term{Labels: t.Labels, Weight: t.Base})
			index = append(index, i)
		}
	}
	return sub, index
}

// Place computes where seats 1..n go when unavailable(term) reports the 0-based terms
// whose capacity cannot be had. unavailable may be nil (every term available).
func (s *Strategy) Place(n int, unavailable func(term int) bool) Placement {
	own := s.Seats(n)
	p := Placement{Terms: make([]int, len(own)), Own: own}
	copy(p.Terms, own)
	if unavailable == nil || len(own) == 0 {
		return p
	}
	fallbacks := 0
	for _, t := range own {
		if unavailable(t) {
			fallbacks++
		}
	}
	if fallbacks == 0 {
		return p
	}
	sub, index := s.available(unavailable)
	if len(sub.Terms) == 0 {
		p.Stuck = true
		return p
	}
	subSeats := sub.Seats(fallbacks)
	k := 0
	for i, t := range own {
		if unavailable(t) {
			p.Terms[i] = index[subSeats[k]]
			k++
		}
	}
	return p
}

// FallbackTerm returns the 0-based term seat (1-based) is placed on while the terms
// unavailable reports cannot be had, and whether that is a fallback (not the seat's own
// term). stuck is set when the seat's own term is unavailable but no term with a
// weight or a base is available: the seat then stays on its own term. It costs one Target and one
// TermOfSeat of each strategy, not a walk over the seats.
func (s *Strategy) FallbackTerm(seat int, unavailable func(term int) bool) (term int, fallback, stuck bool) {
	own := s.TermOfSeat(seat)
	if own < 0 || unavailable == nil || !unavailable(own) {
		return own, false, false
	}
	sub, index := s.available(unavailable)
	if len(sub.Terms) == 0 {
		return own, false, true
	}
	// k: this seat is the k-th of seats 1..seat whose own term is unavailable.
	k := 0
	for t, c := range s.Target(seat) {
		if unavailable(t) {
			k += c
		}
	}
	return index[sub.TermOfSeat(k)], true, false
}
