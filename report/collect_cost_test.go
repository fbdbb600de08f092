package report

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/api/v1alpha1"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// The cost metrics' Collect (SkipServing, PodSelector) reads no NodePool and lists only
// the placed pods: an unplaced pod of the workload is not even listed.
func TestCollectSkipsServingAndSelectsPods(t *testing.T) {
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "demo", UID: "dep", Annotations: map[string]string{strategy.AnnotationStrategy: reportStrategy}},
		Spec:       appsv1.DeploymentSpec{Replicas: ptr.To[int32](2)},
	}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "demo", UID: "rs",
		Annotations: map[string]string{"deployment.kubernetes.io/revision": "1"}, OwnerReferences: ownedBy("Deployment", "web", "dep")}}
	placed := placedPod("p1", "rs", 1, "on-demand", corev1.PodRunning, "n1")
	placed.Labels = map[string]string{strategy.LabelManaged: "true"}
	unplaced := placedPod("p2", "rs", 0, "", corev1.PodRunning, "n1")
	client := fake.NewClientset(dep, rs, &placed, &unplaced, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	// No NodePool list kind registered: this fake cannot list NodePools at all.
	dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		v1alpha1.PlacementPolicies:        "PlacementPolicyList",
		v1alpha1.ClusterPlacementPolicies: "ClusterPlacementPolicyList",
	})
	for selector, wantUnplaced := range map[string]int{strategy.LabelManaged + "=true": 0, "": 1} {
		r, err := Collect(context.Background(), client, dyn, Options{WebhookNamespace: "cksw", SkipServing: true, PodSelector: selector})
		if err != nil {
			t.Fatalf("selector %q: %v", selector, err)
		}
		if len(r.Workloads) != 1 || r.Workloads[0].Terms[0].Placed != 1 || r.Workloads[0].Unplaced != wantUnplaced {
			t.Fatalf("selector %q: %+v", selector, r.Workloads)
		}
	}
}
