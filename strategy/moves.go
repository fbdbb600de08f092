package strategy

// SeatTerm is a live placed pod as Moves reads it: its seat (1-based) and the term of
// the strategy in question it stands on (0-based, -1: none).
type SeatTerm struct{ Seat, Term int }

// Moves counts the pods the convergence loop would move to bring one revision of
// replicas pods onto s's target, no term unavailable: each seat up to replicas whose pod
// stands on another term than s places it there, and each seat up to replicas that no
// placed pod holds (its pod runs unplaced, as every pod of a workload that had no
// strategy does). An audited policy reports this count, and enforcing it evicts as many.
func Moves(s *Strategy, replicas int, pods []SeatTerm) int {
	if replicas <= 0 || len(s.Terms) == 0 {
		return 0
	}
	replicas = min(replicas, MaxSeat)
	held := make([]bool, replicas+1)
	moves := 0
	for _, p := range pods {
		if p.Seat < 1 || p.Seat > replicas || held[p.Seat] {
			continue
		}
		held[p.Seat] = true
		if p.Term != s.TermOfSeat(p.Seat) {
			moves++
		}
	}
	for seat := 1; seat <= replicas; seat++ {
		if !held[seat] {
			moves++
		}
	}
	return moves
}
