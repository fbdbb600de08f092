package strategy

import (
	"strings"
	"testing"
)

// Judge gives every reader one meaning of exact: every seat on its own term. Seats on
// a fallback term, and terms nothing serves, are "fallback" with the reason; anything
// else not on the placement is "off-target".
func TestJudge(t *testing.T) {
	s, err := Parse("karpenter.sh/capacity-type=on-demand,base=1,weight=1:karpenter.sh/capcity-type=spot,weight=3")
	if err != nil {
		t.Fatal(err)
	}
	spotDown := func(i int) (string, bool) { return "4 pods unschedulable for 90s", i == 1 }
	unserved := func(i int) (string, bool) { return `did you mean "karpenter.sh/capacity-type"?`, i == 1 }
	for _, tc := range []struct {
		name  string
		tally Tally
		c     Conditions
		want  State
		why   string
	}{
		{"on target", Tally{Replicas: 5, Placed: []int{2, 3}}, Conditions{}, StateExact, ""},
		{"on target, term unavailable but pods back", Tally{Replicas: 5, Placed: []int{2, 3}}, Conditions{Unavailable: spotDown}, StateExact, ""},
		{"fallback placement", Tally{Replicas: 5, Placed: []int{5, 0}}, Conditions{Unavailable: spotDown}, StateFallback, "term 2 (karpenter.sh/capcity-type=spot) is unavailable: 4 pods unschedulable"},
		{"typo'd term, seats fell back", Tally{Replicas: 5, Placed: []int{5, 0}}, Conditions{Unavailable: spotDown, Unserved: unserved}, StateFallback, "served by no NodePool"},
		{"typo'd term, pods pending on it", Tally{Replicas: 5, Placed: []int{2, 3}}, Conditions{Unserved: unserved}, StateFallback, `term 2 (karpenter.sh/capcity-type=spot) is served by no NodePool, node group or node: did you mean "karpenter.sh/capacity-type"?`},
		{"off target", Tally{Replicas: 5, Placed: []int{3, 2}}, Conditions{}, StateOffTarget, "term 1 (karpenter.sh/capacity-type=on-demand) holds 3 pods, expected 2"},
		{"fallback not reached", Tally{Replicas: 5, Placed: []int{3, 2}}, Conditions{Unavailable: spotDown}, StateOffTarget, "holds 3 pods, expected 5"},
		{"unplaced", Tally{Replicas: 5, Placed: []int{2, 2}, Unplaced: 1}, Conditions{}, StateOffTarget, "1 pods carry no seat"},
		{"cannot run", Tally{Replicas: 5, Placed: []int{2, 3}, CannotRun: 3}, Conditions{}, StateOffTarget, "cannot run their images"},
		{"above replicas", Tally{Replicas: 4, Placed: []int{2, 3}}, Conditions{}, StateOffTarget, "holds 3 pods, expected 2"},
	} {
		v := Judge(s, tc.tally, tc.c)
		if v.State != tc.want || !strings.Contains(v.Why, tc.why) || v.Exact() != (tc.want == StateExact) {
			t.Errorf("%s: got %s (%q), want %s containing %q", tc.name, v.State, v.Why, tc.want, tc.why)
		}
	}
}

// TestTallyAdd pins how every reader counts a live pod: unplaced without a seat or off
// the strategy's terms, placed on its term, and cannot-run only when placed.
func TestTallyAdd(t *testing.T) {
	tl := NewTally(4, 2)
	for _, p := range []LivePod{
		{Seat: 1, Term: 0}, {Seat: 2, Term: 1, CannotRun: true}, {Seat: 0, Term: -1},
		{Seat: 3, Term: -1}, {Seat: 4, Term: 2}, {Seat: 0, Term: 1, CannotRun: true},
	} {
		tl.Add(p)
	}
	if tl.Placed[0] != 1 || tl.Placed[1] != 1 || tl.Unplaced != 4 || tl.CannotRun != 1 || tl.Replicas != 4 {
		t.Fatalf("tally %+v", tl)
	}
}
