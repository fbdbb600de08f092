package strategy

import (
	"slices"
	"testing"
)

func TestFallbackPlacement(t *testing.T) {
	const capacity = "karpenter.sh/capacity-type=on-demand,base=1:karpenter.sh/capacity-type=spot,weight=3"
	const three = "od=1,base=1,weight=0:spot4=1,weight=1:spot8=1,weight=1"
	const weighted = "a=1,base=2,weight=1:b=1,weight=3"
	tests := []struct {
		name, strategy string
		n              int
		unavailable    []int // 0-based
		want           []int // 0-based term per seat 1..n
		wantStuck      bool
	}{
		{"nothing unavailable", capacity, 5, nil, []int{0, 1, 1, 1, 1}, false},
		// Term 2 (spot) gone, term 1 has weight 0 by default: every weighted term is
		// unavailable, so the term with a base takes the seats.
		{"every weighted term unavailable: base terms take them", capacity, 4, []int{1}, []int{0, 0, 0, 0}, false},
		{"every weighted term unavailable, by bases", "a=1,base=1:b=1,base=2:c=1,weight=1", 6, []int{2}, []int{0, 1, 1, 1, 0, 1}, false},
		// Nothing with a weight or a base left: pods stay where they are.
		{"every term unavailable", capacity, 4, []int{0, 1}, []int{0, 1, 1, 1}, true},
		{"every weighted term and the base term unavailable", three, 3, []int{0, 1, 2}, []int{0, 2, 1}, true},
		{"a weight-0 term without base takes nothing", "a=1,weight=0:b=1,weight=1", 2, []int{1}, []int{1, 1}, true},
		// One spot pool gone: its seats go to the other spot pool (the only available
		// weighted term), the base stays.
		{"one of two weighted terms", three, 6, []int{2}, []int{0, 1, 1, 1, 1, 1}, false},
		{"base term unavailable goes to weighted", three, 3, []int{0}, []int{2, 2, 1}, false},
		// a: base 2 then a:b 1:3. Seats: a a b a b b b a b b ... b gone: its seats go to a.
		{"weighted term gone", weighted, 6, []int{1}, []int{0, 0, 0, 0, 0, 0}, false},
		// a gone: its base seats and its weighted seats go to b.
		{"base and weight term gone", weighted, 4, []int{0}, []int{1, 1, 1, 1}, false},
		// Three equal terms (seats c b a c b a), c gone: its seats 1 and 4 are the first
		// and second seats of a:b, which go to b (tie to the later term), then a.
		{"fallback seats shared by Sainte-Laguë", "a=1:b=1:c=1", 6, []int{2}, []int{1, 1, 0, 0, 1, 0}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse(tc.strategy)
			if err != nil {
				t.Fatal(err)
			}
			unavailable := func(term int) bool { return slices.Contains(tc.unavailable, term) }
			if tc.unavailable == nil {
				unavailable = nil
			}
			p := s.Place(tc.n, unavailable)
			if !slices.Equal(p.Terms, tc.want) || p.Stuck != tc.wantStuck {
				t.Fatalf("Place(%d) = %v stuck %v, want %v stuck %v (own %v)", tc.n, p.Terms, p.Stuck, tc.want, tc.wantStuck, p.Own)
			}
			for seat := 1; seat <= tc.n; seat++ {
				term, fallback, stuck := s.FallbackTerm(seat, unavailable)
				if term != tc.want[seat-1] || fallback != p.Fallback(seat) {
					t.Errorf("FallbackTerm(%d) = %d fallback %v, Place says %d fallback %v", seat, term, fallback, tc.want[seat-1], p.Fallback(seat))
				}
				ownGone := unavailable != nil && unavailable(p.Own[seat-1])
				if stuck != (tc.wantStuck && ownGone) {
					t.Errorf("FallbackTerm(%d) stuck %v, want %v", seat, stuck, tc.wantStuck && ownGone)
				}
			}
		})
	}
}

// Fallback seats are house-monotone too: growing n never moves an earlier seat.
func TestFallbackHouseMonotone(t *testing.T) {
	s, err := Parse("a=1,base=2,weight=1:b=1,weight=3:c=1,weight=2")
	if err != nil {
		t.Fatal(err)
	}
	gone := func(term int) bool { return term == 1 }
	prev := s.Place(0, gone).Terms
	for n := 1; n <= 200; n++ {
		cur := s.Place(n, gone).Terms
		if !slices.Equal(cur[:n-1], prev) {
			t.Fatalf("n=%d moved an earlier seat: %v -> %v", n, prev, cur)
		}
		prev = cur
	}
}
