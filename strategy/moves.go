package strategy

// SeatTerm is a live pod as Moves reads it: its seat (1-based; 0: unplaced), the term of
// the strategy in question it stands on (0-based, -1: none), and Stays when the loop
// never moves it (karpenter.sh/do-not-disrupt).
type SeatTerm struct {
	Seat, Term int
	Stays      bool
}

// Moves counts the pods the convergence loop would move to bring one revision of
// replicas pods onto s's target, no term unavailable: each seat up to replicas whose pod
// stands on another term than s places it there, and each seat up to replicas that no
// placed pod holds (its pod runs unplaced, as every pod of a workload that had no
// strategy does). Pods that stay are not moved: neither a placed one off its term nor an
// unplaced one (its seat stays free). An audited policy reports this count, and
// enforcing it evicts as many.
func Moves(s *Strategy, replicas int, pods []SeatTerm) int {
	off, free := Moving(s, replicas, pods)
	return len(off) + free
}

// Moving is Moves with the pods named: the indexes in pods of those on another term
// than s places their seat, and how many seats up to replicas no placed pod holds whose
// unplaced pod would move.
func Moving(s *Strategy, replicas int, pods []SeatTerm) (off []int, free int) {
	if replicas <= 0 || len(s.Terms) == 0 {
		return nil, 0
	}
	replicas = min(replicas, MaxSeat)
	held := make([]bool, replicas+1)
	unplacedStaying := 0
	for i, p := range pods {
		if p.Seat < 1 && p.Stays {
			unplacedStaying++
		}
		if p.Seat < 1 || p.Seat > replicas || held[p.Seat] {
			continue
		}
		held[p.Seat] = true
		if p.Term != s.TermOfSeat(p.Seat) && !p.Stays {
			off = append(off, i)
		}
	}
	for seat := 1; seat <= replicas; seat++ {
		if !held[seat] {
			free++
		}
	}
	return off, max(0, free-unplacedStaying)
}
