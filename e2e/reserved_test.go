//go:build e2e

package e2e

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// reservedSetStrategy fills reservations first, then on-demand, for its base; spot after.
const reservedSetStrategy = "karpenter.sh/capacity-type=reserved|on-demand,base=3:karpenter.sh/capacity-type=spot"

// A set term on the real cluster: its pods get the required node affinity
// "karpenter.sh/capacity-type In [reserved, on-demand]" and no capacity-type
// nodeSelector, and Karpenter serves them. The local cluster offers no reservation,
// so the set's other value takes them all: the split stays exact, counted from the
// capacity-type labels of the nodes the pods run on.
func TestReservedOrOnDemandSetTerm(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(ctx, t, "e2e-reserved-set")
	d := deployment(ns, "reserved-set", reservedSetStrategy, 8, true)
	createDeployment(ctx, t, d)
	pods := settled(ctx, t, ns, d.Name, 8)

	allNodes := nodes(ctx, t)
	byCapacity := map[string]int{}
	want := []string{"reserved", "on-demand"}
	for _, p := range pods {
		if p.Status.Phase != corev1.PodRunning {
			t.Errorf("pod %s: phase %s, want Running", p.Name, p.Status.Phase)
			continue
		}
		node := allNodes[p.Spec.NodeName]
		capacity := node.Labels[strategy.CapacityTypeLabel]
		byCapacity[capacity]++
		if p.Annotations[strategy.AnnotationTerm] != "1" {
			continue
		}
		if v, ok := p.Spec.NodeSelector[strategy.CapacityTypeLabel]; ok {
			t.Errorf("pod %s of the set term has nodeSelector %s=%s; want the set as node affinity", p.Name, strategy.CapacityTypeLabel, v)
		}
		if !requiresIn(p, strategy.CapacityTypeLabel, want) {
			t.Errorf("pod %s of the set term: required node affinity %+v lacks %s In %v", p.Name, p.Spec.Affinity, strategy.CapacityTypeLabel, want)
		}
		if !slices.Contains(want, capacity) {
			t.Errorf("pod %s of the set term runs on node %s with capacity type %q", p.Name, node.Name, capacity)
		}
	}
	// The target for 8 pods is 3 on the set term, 5 on spot.
	if got := byCapacity["reserved"] + byCapacity["on-demand"]; got != 3 || byCapacity["spot"] != 5 {
		t.Errorf("pods by node capacity type %v, want 3 reserved or on-demand and 5 spot", byCapacity)
	}
}

// requiresIn reports whether every required node affinity term of p carries key In values.
func requiresIn(p corev1.Pod, key string, values []string) bool {
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return false
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	for _, term := range terms {
		if !slices.ContainsFunc(term.MatchExpressions, func(r corev1.NodeSelectorRequirement) bool {
			return r.Key == key && r.Operator == corev1.NodeSelectorOpIn && slices.Equal(r.Values, values)
		}) {
			return false
		}
	}
	return len(terms) > 0
}
