package plan

import (
	"context"
	"strconv"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	dynfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/api/v1alpha1"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/policy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// A live Deployment without a strategy of its own, governed by a policy: plan --cluster
// counts its placed pods as spread does (it counted none: the live report was built
// without the policies).
func TestLiveWorkloadGovernedByAPolicyCountsItsPods(t *testing.T) {
	const strat = "capacity=on-demand,base=1:capacity=spot"
	ref := func(kind, name string, uid string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: name, UID: types.UID(uid), Controller: ptr.To(true)}}
	}
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", UID: "dep", Labels: map[string]string{"app": "web"},
		Annotations: map[string]string{"deployment.kubernetes.io/revision": "1"}},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](3), Selector: sel}}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop", UID: "rs", Labels: map[string]string{"app": "web"},
		Annotations: map[string]string{"deployment.kubernetes.io/revision": "1"}, OwnerReferences: ref("Deployment", "web", "dep")}}
	objs := []runtime.Object{dep, rs}
	for seat, capacity := range map[int]string{1: "on-demand", 2: "spot", 3: "spot"} {
		objs = append(objs, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "web-" + strconv.Itoa(seat), Namespace: "shop", Labels: map[string]string{"app": "web"},
				Annotations: map[string]string{strategy.AnnotationSeat: strconv.Itoa(seat)}, OwnerReferences: ref("ReplicaSet", "web-1", "rs")},
			Spec:   corev1.PodSpec{NodeName: "n", NodeSelector: map[string]string{"capacity": capacity}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning},
		})
	}
	client := fake.NewClientset(objs...)
	dyn := dynfake.NewSimpleDynamicClient(runtime.NewScheme())
	pol := v1alpha1.PlacementPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "split"},
		Spec: v1alpha1.PlacementPolicySpec{Strategy: strat, Selector: sel}}
	s, err := strategy.Parse(strat)
	if err != nil {
		t.Fatal(err)
	}
	var c Capacity
	o := Options{Kind: "Deployment", Namespace: "shop", Name: "web", Policies: policy.NewIndex([]v1alpha1.PlacementPolicy{pol}, nil, nil)}
	placed, err := live(context.Background(), client, dyn, s, o, &c)
	if err != nil {
		t.Fatalf("live workload governed by a policy: %v", err)
	}
	if len(placed) != 2 || placed[0] != 1 || placed[1] != 2 {
		t.Fatalf("placed per term %v, want [1 2]", placed)
	}
	o.Policies = nil
	if _, err := live(context.Background(), client, dyn, s, o, &c); err == nil {
		t.Fatal("without the policies the live workload carries no strategy, want an error")
	}
}
