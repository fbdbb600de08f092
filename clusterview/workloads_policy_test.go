package clusterview

import (
	"context"
	"math"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/api/v1alpha1"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/policy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// The workload's chain ends with its policy and namespace default (kind and labels of
// the Deployment, not its ReplicaSet); with no policy in the namespace, resolving costs
// no allocation more than without policies at all.
func TestChainEndsWithPolicyLinks(t *testing.T) {
	objects := workloadObjects("")
	for _, obj := range objects {
		switch o := obj.(type) {
		case interface{ GetObjectMeta() metav1.Object }:
			o.GetObjectMeta().SetAnnotations(nil)
			o.GetObjectMeta().SetLabels(map[string]string{"app": "web"})
		}
	}
	resolver := syncedCaches(t, objects...).Resolver
	ctx := context.Background()
	rsRef := controllerRef("ReplicaSet", "web-5c4ff85997", testRSUID)
	// The fewest of a few measurements: AllocsPerRun counts every goroutine's
	// allocations, and the informers' goroutines run beside it (under -race, a
	// difference of one showed up).
	allocs := func() float64 {
		least := math.Inf(1)
		for range 5 {
			least = min(least, testing.AllocsPerRun(50, func() { _, _ = resolver.Resolve(ctx, testNS, &rsRef) }))
		}
		return least
	}
	without := allocs()

	pol := v1alpha1.PlacementPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "elsewhere", Name: "p"}, Spec: v1alpha1.PlacementPolicySpec{Strategy: "a=1"}}
	resolver.Policies = policy.NewIndex([]v1alpha1.PlacementPolicy{pol}, nil, []corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: testNS}}})
	if with := allocs(); with != without {
		t.Errorf("resolving with policies elsewhere: %v allocations, without policies %v", with, without)
	}

	deploymentsOnly := v1alpha1.PlacementPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "web-split"},
		Spec: v1alpha1.PlacementPolicySpec{Strategy: "a=1", Kinds: []v1alpha1.WorkloadKind{v1alpha1.KindDeployment},
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}
	resolver.Policies = policy.NewIndex([]v1alpha1.PlacementPolicy{deploymentsOnly}, nil, nil)
	w, err := resolver.Resolve(ctx, testNS, &rsRef)
	if err != nil {
		t.Fatal(err)
	}
	if src := strategy.Find(w.Chain...); src.Raw != "a=1" || src.Object != "PlacementPolicy "+testNS+"/web-split" {
		t.Fatalf("chain %+v resolves to %+v", w.Chain, src)
	}
}
