package policy

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/api/v1alpha1"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/doccheck"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// TestStatuses: workloads with their own strategy are not counted; two policies of one
// priority matching a workload both report the conflict, naming the winner; an invalid
// strategy is reported with the parser's message.
func TestStatuses(t *testing.T) {
	idx := NewIndex([]v1alpha1.PlacementPolicy{
		pp("shop", "aa", "a=1", 0, nil),
		pp("shop", "zz", "z=1", 0, map[string]string{"app": "web"}),
		pp("shop", "bad", "nolabel", -1, map[string]string{"app": "api"}),
	}, nil, nil)
	ws := []Governable{
		{Workload: Workload{Namespace: "shop", Kind: "Deployment", Labels: map[string]string{"app": "web"}}, Name: "web",
			Exact: func(*strategy.Strategy) (bool, string) { return true, "" }},
		{Workload: Workload{Namespace: "shop", Kind: "Deployment", Labels: map[string]string{"app": "db"}}, Name: "db",
			Exact: func(*strategy.Strategy) (bool, string) {
				return false, "off-target: 2 pods stand off their seat's term"
			},
			Waits: func(link strategy.AnnotatedObject) string { return "moves wait for window (set on " + link.Name + ")" }},
		{Workload: Workload{Namespace: "shop", Kind: "Deployment", Labels: map[string]string{"app": "web"}}, Name: "own", Own: true},
	}
	got := map[string]*Status{}
	statuses, _ := Statuses(idx.p, ws, func(string) *Namespace { return nil }, nil)
	for c, s := range statuses {
		got[c.Name] = s
	}
	if s := got["aa"]; s.Workloads != 2 || len(s.Conflicts) != 1 || !strings.Contains(s.Conflicts[0], "Deployment shop/web: also matched by PlacementPolicy shop/zz") {
		t.Errorf("aa: %+v", s)
	}
	// A workload off its target says its moves wait for their window.
	if s := got["aa"]; s.Exact != 1 || len(s.NotExact) != 1 || s.NotExact[0].Name != "db" || s.NotExact[0].Reason != "off-target: 2 pods stand off their seat's term; moves wait for window (set on PlacementPolicy shop/aa)" {
		t.Errorf("aa: exact %d, not exact %+v", s.Exact, s.NotExact)
	}
	if s := got["zz"]; s.Workloads != 0 || len(s.Conflicts) != 1 || !strings.Contains(s.Conflicts[0], "PlacementPolicy shop/aa wins") {
		t.Errorf("zz: %+v", s)
	}
	if s := got["bad"]; s.Workloads != 0 || !strings.Contains(s.Invalid, `term 1 ("nolabel")`) {
		t.Errorf("bad: %+v", s)
	}
	now := metav1.NewTime(time.Unix(1000, 0))
	conds := got["bad"].conditions(nil, now)
	if conds[0].Type != v1alpha1.ConditionAccepted || conds[0].Status != metav1.ConditionFalse || conds[0].Reason != "Invalid" {
		t.Errorf("conditions of an invalid policy: %+v", conds)
	}
	later := metav1.NewTime(time.Unix(2000, 0))
	again := got["aa"].conditions(got["aa"].conditions(nil, now), later)
	if again[1].Status != metav1.ConditionTrue || !again[1].LastTransitionTime.Equal(&now) {
		t.Errorf("an unchanged condition keeps its transition time: %+v", again[1])
	}
}

// Policy mistakes tell the truth in status: a selector that governs nothing, every
// selected workload out of scope, a term nothing serves (with the likely typo); Ready
// sums them up with the first problem's reason.
func TestStatusConditionsOfMistakes(t *testing.T) {
	idx := NewIndex([]v1alpha1.PlacementPolicy{
		pp("shop", "typo-selector", "karpenter.sh/capacity-type=spot", 0, map[string]string{"ap": "web"}),
		pp("shop", "typo-term", "karpenter.sh/capacity-type=on-demand,base=1:karpenter.sh/capcity-type=spot", 0, map[string]string{"app": "web"}),
		pp("dev", "off", "karpenter.sh/capacity-type=spot", 0, map[string]string{"app": "api"}),
	}, nil, nil)
	ws := []Governable{
		{Workload: Workload{Namespace: "shop", Kind: "Deployment", Labels: map[string]string{"app": "web"}}, Name: "web"},
		{Workload: Workload{Namespace: "dev", Kind: "Deployment", Labels: map[string]string{"app": "api"}}, Name: "api", OutOfScope: "namespace dev is not enabled"},
	}
	unserved := func(labels map[string]string) (string, bool) {
		if _, typo := labels["karpenter.sh/capcity-type"]; typo {
			return `did you mean "karpenter.sh/capacity-type"?`, true
		}
		return "", false
	}
	now := metav1.NewTime(time.Unix(1000, 0))
	cond := map[string]map[string]metav1.Condition{}
	statuses, _ := Statuses(idx.p, ws, func(string) *Namespace { return nil }, unserved)
	for c, s := range statuses {
		cond[c.Name] = map[string]metav1.Condition{}
		for _, cd := range s.conditions(nil, now) {
			cond[c.Name][cd.Type] = cd
		}
	}
	for _, tc := range []struct{ policy, typ, status, reason, says string }{
		{"typo-selector", v1alpha1.ConditionGoverning, "False", "SelectsNothing", "check spec.selector"},
		{"typo-selector", v1alpha1.ConditionReady, "False", "SelectsNothing", ""},
		{"typo-term", v1alpha1.ConditionServed, "False", "TermUnserved", `term 2 (karpenter.sh/capcity-type=spot) is served by no NodePool, node group or node: did you mean "karpenter.sh/capacity-type"?`},
		{"typo-term", v1alpha1.ConditionGoverning, "True", "Governing", "governs 1 workloads"},
		{"typo-term", v1alpha1.ConditionReady, "False", "TermUnserved", "did you mean"},
		{"off", v1alpha1.ConditionGoverning, "False", "OutOfScope", "namespace dev is not enabled"},
		{"off", v1alpha1.ConditionInScope, "False", "NamespaceNotEnabled", ""},
		{"off", v1alpha1.ConditionReady, "False", "OutOfScope", "namespace dev is not enabled"},
	} {
		c := cond[tc.policy][tc.typ]
		if string(c.Status) != tc.status || c.Reason != tc.reason || !strings.Contains(c.Message, tc.says) {
			t.Errorf("%s %s: %s %s %q, want %s %s saying %q", tc.policy, tc.typ, c.Status, c.Reason, c.Message, tc.status, tc.reason, tc.says)
		}
	}
}

// docs/messages.md's condition table is what the status writes: every condition a
// status can carry is a row, and every row is written by some status.
func TestConditionCatalogue(t *testing.T) {
	rows, err := doccheck.Table("../docs/messages.md", "Policy conditions")
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	reasons := map[string]bool{}
	for _, r := range rows {
		listed[r[0]+"/"+r[1]+"/"+r[2]] = false
		reasons[r[2]] = true
	}
	statuses := []*Status{
		{Workloads: 2},
		{Workloads: 2, Audit: true, WouldMove: 3},
		{Workloads: 2, Suspended: true},
		{Workloads: 2, Stopped: "every move is stopped"},
		{Invalid: "spec.strategy: bad", Conflicts: []string{"x"}, OutOfScope: []string{"y"}, Unserved: []string{"z"}},
		{OutOfScope: []string{"y"}},
		{},
	}
	now := metav1.Now()
	for _, s := range statuses {
		for _, c := range s.conditions(nil, now) {
			key := c.Type + "/" + string(c.Status) + "/" + c.Reason
			if c.Type == v1alpha1.ConditionReady && c.Status == metav1.ConditionFalse {
				if !reasons[c.Reason] {
					t.Errorf("Ready=False has reason %q, which no row of docs/messages.md lists", c.Reason)
				}
				key = c.Type + "/False/the first problem's"
			}
			if _, ok := listed[key]; !ok {
				t.Errorf("docs/messages.md lists no condition %s", key)
			}
			listed[key] = true
		}
	}
	for key, seen := range listed {
		if !seen {
			t.Errorf("docs/messages.md lists %s, which no status writes", key)
		}
	}
}
