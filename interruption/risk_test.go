package interruption

import (
	"fmt"
	"testing"
	"time"
)

func TestRuleAssess(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	rule := Rule{Window: 10 * time.Minute, SharePercent: 50, MinNodes: 2}
	sig := func(kind Kind, ago time.Duration) NodeSignals {
		return NodeSignals{Instance: "i-x", At: map[Kind]time.Time{kind: now.Add(-ago)}}
	}
	nodes := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("n%d", i)
		}
		return out
	}
	tests := []struct {
		name      string
		rule      Rule
		term      []string
		signals   map[string]NodeSignals
		atRisk    bool
		signalled int
	}{
		{name: "no signals", rule: rule, term: nodes(4), atRisk: false},
		{name: "half of the nodes", rule: rule, term: nodes(4), signals: map[string]NodeSignals{"n0": sig(KindRebalance, time.Minute), "n1": sig(KindRebalance, 2*time.Minute)}, atRisk: true, signalled: 2},
		{name: "under half", rule: rule, term: nodes(5), signals: map[string]NodeSignals{"n0": sig(KindRebalance, time.Minute), "n1": sig(KindInterruption, time.Minute)}, atRisk: false, signalled: 2},
		{name: "one node of one is under the minimum", rule: rule, term: nodes(1), signals: map[string]NodeSignals{"n0": sig(KindRebalance, time.Minute)}, atRisk: false, signalled: 1},
		{name: "minimum of one", rule: Rule{Window: 10 * time.Minute, SharePercent: 50, MinNodes: 1}, term: nodes(1), signals: map[string]NodeSignals{"n0": sig(KindRebalance, time.Minute)}, atRisk: true, signalled: 1},
		{name: "signals older than the window do not count", rule: rule, term: nodes(2), signals: map[string]NodeSignals{"n0": sig(KindRebalance, time.Minute), "n1": sig(KindRebalance, 10*time.Minute)}, atRisk: false, signalled: 1},
		{name: "signals of other nodes do not count", rule: rule, term: nodes(2), signals: map[string]NodeSignals{"n0": sig(KindRebalance, time.Minute), "other": sig(KindRebalance, time.Minute), "other2": sig(KindInterruption, time.Minute)}, atRisk: false, signalled: 1},
		{name: "a signal from the future does not count", rule: rule, term: nodes(2), signals: map[string]NodeSignals{"n0": sig(KindRebalance, time.Minute), "n1": sig(KindRebalance, -time.Minute)}, atRisk: false, signalled: 1},
		{name: "state changes count", rule: rule, term: nodes(3), signals: map[string]NodeSignals{"n0": sig(KindStateChange, time.Minute), "n1": sig(KindInterruption, time.Minute)}, atRisk: true, signalled: 2},
		{name: "every node at 100%", rule: Rule{Window: time.Minute, SharePercent: 100, MinNodes: 2}, term: nodes(3), signals: map[string]NodeSignals{"n0": sig(KindRebalance, 0), "n1": sig(KindRebalance, 0), "n2": sig(KindRebalance, 0)}, atRisk: true, signalled: 3},
		{name: "two of three at 100%", rule: Rule{Window: time.Minute, SharePercent: 100, MinNodes: 2}, term: nodes(3), signals: map[string]NodeSignals{"n0": sig(KindRebalance, 0), "n1": sig(KindRebalance, 0)}, atRisk: false, signalled: 2},
		{name: "a term without nodes", rule: rule, term: nil, signals: map[string]NodeSignals{"n0": sig(KindRebalance, 0)}, atRisk: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := tc.rule.Assess(tc.term, tc.signals, now)
			if v.AtRisk != tc.atRisk || len(v.Signalled) != tc.signalled || v.Nodes != len(tc.term) {
				t.Fatalf("at risk %v with %d of %d nodes signalled; want %v with %d", v.AtRisk, len(v.Signalled), v.Nodes, tc.atRisk, tc.signalled)
			}
			for name := range v.Signalled {
				if _, _, _, ok := v.Node(name); !ok {
					t.Errorf("node %s signalled but Node says none", name)
				}
			}
		})
	}
}

func TestVerdictEvidence(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	rule := DefaultRule()
	signals := map[string]NodeSignals{}
	var names []string
	for i := range 12 {
		name := fmt.Sprintf("n%02d", i)
		names = append(names, name)
		signals[name] = NodeSignals{Instance: fmt.Sprintf("i-%02d", i), At: map[Kind]time.Time{KindRebalance: now.Add(-time.Minute)}}
	}
	signals["n00"].At[KindInterruption] = now
	v := rule.Assess(append(names, "quiet1", "quiet2"), signals, now)
	got := v.Evidence()
	want := "EC2 signals for 12 of the term's 14 nodes within 10m0s (rule: 50%, at least 2): 1 interruption-warning, 12 rebalance-recommendation; last at 2026-03-01T12:00:00Z; instances i-00, i-01, i-02, i-03, i-04, i-05, i-06, i-07, +4 more"
	if got != want {
		t.Fatalf("evidence\n%s\nwant\n%s", got, want)
	}
	if at, kind, id, ok := v.Node("n00"); !ok || kind != KindInterruption || !at.Equal(now) || id != "i-00" {
		t.Errorf("Node(n00) = %v %s %s %v, want the interruption warning at now", at, kind, id, ok)
	}
}

func TestRuleValidate(t *testing.T) {
	if err := DefaultRule().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, r := range []Rule{{Window: 0, SharePercent: 50, MinNodes: 1}, {Window: time.Minute, SharePercent: 0, MinNodes: 1}, {Window: time.Minute, SharePercent: 101, MinNodes: 1}, {Window: time.Minute, SharePercent: 50}} {
		if r.Validate() == nil {
			t.Errorf("%+v accepted", r)
		}
	}
}
