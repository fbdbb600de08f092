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
	if _, err := ReadManifest(manifest); err == nil || !strings.Contains(err.Error(), "no Deployment or StatefulSet") {
		t.Fatalf("without policies: %v", err)
	}
}
