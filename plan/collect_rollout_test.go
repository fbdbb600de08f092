package plan

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	dynfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/report"
)

// A live Argo Rollout is read with its ReplicaSets, for the report that counts its
// placed pods.
func TestLiveRolloutReadsItsReplicaSets(t *testing.T) {
	ro := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
		"metadata": map[string]any{"name": "web", "namespace": "shop", "uid": "ro-uid", "annotations": map[string]any{"CustomPodScheduleStrategy": "a=1"}},
		"spec":     map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"app": "web"}}},
	}}
	dyn := dynfake.NewSimpleDynamicClient(runtime.NewScheme(), ro)
	yes := true
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop", Labels: map[string]string{"app": "web"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "argoproj.io/v1alpha1", Kind: "Rollout", Name: "web", UID: "ro-uid", Controller: &yes}}}}
	client := fake.NewClientset(rs)
	st := &report.State{Nodes: map[string]*corev1.Node{}}
	sel, err := liveRollout(context.Background(), client, dyn, Options{Kind: "Rollout", Namespace: "shop", Name: "web"}, st)
	if err != nil {
		t.Fatal(err)
	}
	if sel.MatchLabels["app"] != "web" || len(st.Rollouts) != 1 || st.Rollouts[0].UID != "ro-uid" || st.Rollouts[0].Annotations["CustomPodScheduleStrategy"] != "a=1" || len(st.ReplicaSets) != 1 {
		t.Fatalf("selector %v, state %+v", sel, st)
	}
}
