package placement

import (
	"context"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook/internal/webhooktest"
)

// A term with a set of values is patched as a required node affinity "In", merged into
// every term the pod already has; its single values stay in the nodeSelector.
func TestSetTermIsPatchedAsNodeAffinityIn(t *testing.T) {
	const strat = "karpenter.sh/capacity-type=reserved|on-demand,zone=a,base=1:karpenter.sh/capacity-type=spot"
	set := corev1.NodeSelectorRequirement{Key: strategy.CapacityTypeLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{"reserved", "on-demand"}}
	own := corev1.NodeSelectorRequirement{Key: "team", Operator: corev1.NodeSelectorOpIn, Values: []string{"x"}}
	for _, tc := range []struct {
		name     string
		affinity *corev1.Affinity
		want     []corev1.NodeSelectorTerm
	}{
		{"no affinity", nil, []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{set}}}},
		{"ANDed into each of the pod's terms", &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{own}}, {}},
		}}}, []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{own, set}}, {MatchExpressions: []corev1.NodeSelectorRequirement{set}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, _, _ := newCluster(strat).mutator(t)
			pod := webhooktest.RSPod(testNS, testRSUID)
			pod.Spec.Affinity = tc.affinity
			req := webhooktest.CreateRequest(t, pod)
			got := applyPatch(t, req, m.Admit(context.Background(), req))
			if !reflect.DeepEqual(got.Spec.NodeSelector, map[string]string{"zone": "a"}) {
				t.Errorf("nodeSelector %v, want only zone=a", got.Spec.NodeSelector)
			}
			if terms := requiredTerms(got); !equalJSON(t, terms, tc.want) {
				t.Errorf("required terms %+v, want %+v", terms, tc.want)
			}
			s, err := strategy.Parse(strat)
			if err != nil {
				t.Fatal(err)
			}
			if term := strategy.TermOf(s, got); term != 0 {
				t.Errorf("the placed pod reads as on term %d, want 0", term)
			}
			// Admitted again (a reinvocation), nothing changes.
			expectUnchanged(t, m.Admit(context.Background(), webhooktest.CreateRequest(t, got)), "")
		})
	}
}

// A pod whose nodeSelector picks a value of the set keeps it; one outside the set is a conflict.
func TestSetTermAndThePodsNodeSelector(t *testing.T) {
	const strat = "karpenter.sh/capacity-type=reserved|on-demand"
	m, _, _ := newCluster(strat).mutator(t)
	pod := webhooktest.RSPod(testNS, testRSUID)
	pod.Spec.NodeSelector = map[string]string{strategy.CapacityTypeLabel: "on-demand"}
	req := webhooktest.CreateRequest(t, pod)
	got := applyPatch(t, req, m.Admit(context.Background(), req))
	if got.Spec.NodeSelector[strategy.CapacityTypeLabel] != "on-demand" || got.Spec.Affinity != nil {
		t.Errorf("the pod's own choice inside the set was not kept: %+v %+v", got.Spec.NodeSelector, got.Spec.Affinity)
	}
	m2, _, _ := newCluster(strat).mutator(t)
	pod = webhooktest.RSPod(testNS, testRSUID)
	pod.Spec.NodeSelector = map[string]string{strategy.CapacityTypeLabel: "spot"}
	expectUnchanged(t, m2.Admit(context.Background(), webhooktest.CreateRequest(t, pod)), `karpenter.sh/capacity-type is "spot", the term wants "reserved|on-demand"`)
}

// With OnDemandAcceptsReserved an on-demand term accepts reservations, as Karpenter advises.
func TestOnDemandAcceptsReserved(t *testing.T) {
	const strat = "karpenter.sh/capacity-type=on-demand,base=1:karpenter.sh/capacity-type=spot"
	for _, on := range []bool{false, true} {
		m, _, _ := newCluster(strat).mutator(t)
		m.OnDemandAcceptsReserved = on
		req := webhooktest.CreateRequest(t, webhooktest.RSPod(testNS, testRSUID))
		got := applyPatch(t, req, m.Admit(context.Background(), req))
		if !on {
			if got.Spec.NodeSelector[strategy.CapacityTypeLabel] != "on-demand" || got.Spec.Affinity != nil {
				t.Errorf("off: want today's nodeSelector patch, got %v %+v", got.Spec.NodeSelector, got.Spec.Affinity)
			}
			continue
		}
		want := []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: strategy.CapacityTypeLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{"on-demand", "reserved"}}}}}
		if _, pinned := got.Spec.NodeSelector[strategy.CapacityTypeLabel]; pinned || !equalJSON(t, requiredTerms(got), want) {
			t.Errorf("on: nodeSelector %v, required terms %+v", got.Spec.NodeSelector, requiredTerms(got))
		}
		s, err := strategy.Parse(strat)
		if err != nil {
			t.Fatal(err)
		}
		if term := strategy.TermOf(s, got); term != 0 {
			t.Errorf("the widened pod reads as on term %d, want 0", term)
		}
	}
}
