package plan

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/api/v1alpha1"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/policy"
)

// TestReadManifestWithPolicies: in a cluster, a manifest without a strategy of its own
// is planned with its policy's, and says so; without policies it has none.
func TestReadManifestWithPolicies(t *testing.T) {
	manifest := []byte(`apiVersion: apps/v1
kind: Deployment
metadata: {name: web, labels: {app: web}}
spec: {replicas: 4}
`)
	pol := v1alpha1.PlacementPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-split"},
		Spec: v1alpha1.PlacementPolicySpec{Strategy: "a=1,base=1:b=1", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}
	w, err := ReadManifestWith(manifest, policy.NewIndex([]v1alpha1.PlacementPolicy{pol}, nil, nil), "shop")
	if err != nil {
		t.Fatal(err)
	}
	if w.Strategy != "a=1,base=1:b=1" || w.Source != "PlacementPolicy shop/web-split" || w.Replicas != 4 {
		t.Fatalf("got %+v", w)
	}
	if _, err := ReadManifest(manifest); err == nil || !strings.Contains(err.Error(), "no Deployment, StatefulSet, Rollout, Job or CronJob") {
		t.Fatalf("without policies: %v", err)
	}
}

// TestReadManifestRollout: an Argo Rollout is planned like a Deployment: its own
// annotation, else a policy for kind Rollout; a Rollout of another API group is not one.
func TestReadManifestRollout(t *testing.T) {
	rollout := func(group, annotations string) []byte {
		return []byte(`apiVersion: ` + group + `/v1alpha1
kind: Rollout
metadata: {name: web, labels: {team: web}` + annotations + `}
spec:
  replicas: 6
  template:
    spec:
      containers: [{name: app, image: x, resources: {requests: {cpu: 250m}}}]
`)
	}
	w, err := ReadManifest(rollout("argoproj.io", `, annotations: {CustomPodScheduleStrategy: "a=1,base=1:b=1"}`))
	if err != nil {
		t.Fatal(err)
	}
	if w.Kind != "Rollout" || w.Source != "Rollout web" || w.Replicas != 6 || w.Requests.Cpu().String() != "250m" {
		t.Fatalf("annotated Rollout: %+v", w)
	}
	pol := v1alpha1.PlacementPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "rollouts"},
		Spec: v1alpha1.PlacementPolicySpec{Strategy: "a=1", Kinds: []v1alpha1.WorkloadKind{v1alpha1.KindRollout}}}
	idx := policy.NewIndex([]v1alpha1.PlacementPolicy{pol}, nil, nil)
	if w, err := ReadManifestWith(rollout("argoproj.io", ""), idx, "shop"); err != nil || w.Source != "PlacementPolicy shop/rollouts" {
		t.Fatalf("un-annotated Rollout under a policy for Rollouts: %+v, %v", w, err)
	}
	if _, err := ReadManifestWith(rollout("example.com", ""), idx, "shop"); err == nil {
		t.Fatal("a Rollout of another API group was read as Argo's")
	}
}
