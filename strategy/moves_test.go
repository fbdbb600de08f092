package strategy

import "testing"

func TestMoves(t *testing.T) {
	s, err := Parse("karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3")
	if err != nil {
		t.Fatal(err)
	}
	// Target for 5: seats 1,2 on-demand (bases), then weighted seats 3.. by Sainte-Laguë.
	exact := make([]SeatTerm, 0, 5)
	for seat := 1; seat <= 5; seat++ {
		exact = append(exact, SeatTerm{Seat: seat, Term: s.TermOfSeat(seat)})
	}
	cases := []struct {
		name     string
		replicas int
		pods     []SeatTerm
		want     int
	}{
		{"exact", 5, exact, 0},
		{"no strategy before: every pod unplaced", 5, nil, 5},
		{"one pod on the other term", 5, append([]SeatTerm{{Seat: 1, Term: 1}}, exact[1:]...), 1},
		{"a term the strategy lacks", 5, append([]SeatTerm{{Seat: 2, Term: -1}}, append(exact[:1:1], exact[2:]...)...), 1},
		{"a seat held twice counts once, the free seat moves", 5, append(exact[:4:4], SeatTerm{Seat: 4, Term: exact[3].Term}), 1},
		{"seats above the replicas are not counted", 3, exact, 0},
		{"a pod off its term that stays is not moved", 5, append([]SeatTerm{{Seat: 1, Term: 1, Stays: true}}, exact[1:]...), 0},
		{"an unplaced pod that stays is not moved", 5, []SeatTerm{{Seat: 0, Term: -1, Stays: true}}, 4},
		{"unplaced pods that stay outnumbering free seats", 1, append(exact[:1:1], SeatTerm{Term: -1, Stays: true}), 0},
	}
	for _, c := range cases {
		if got := Moves(s, c.replicas, c.pods); got != c.want {
			t.Errorf("%s: Moves = %d, want %d", c.name, got, c.want)
		}
	}
}
