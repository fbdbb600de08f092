package report

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/api/v1alpha1"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/policy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// TestBuildNamesTheStrategySource: workloads without a strategy of their own are
// reported with their policy's or namespace default's, and say which.
func TestBuildNamesTheStrategySource(t *testing.T) {
	dep := func(name string, ann map[string]string) appsv1.Deployment {
		return appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "demo", Labels: map[string]string{"app": name}, Annotations: ann},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2)}}
	}
	pol := v1alpha1.PlacementPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web-split"},
		Spec: v1alpha1.PlacementPolicySpec{Strategy: reportStrategy, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}
	ns := corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "demo", Annotations: map[string]string{strategy.AnnotationStrategy: "capacity=spot"}}}
	st := &State{
		Deployments: []appsv1.Deployment{dep("web", nil), dep("api", nil), dep("own", map[string]string{strategy.AnnotationStrategy: reportStrategy})},
		Policies:    policy.NewIndex([]v1alpha1.PlacementPolicy{pol}, nil, []corev1.Namespace{ns}),
	}
	got := map[string]string{}
	for _, w := range Build(st, func(string, string) bool { return true }).Workloads {
		got[w.Name] = w.Source + " | " + w.Strategy
	}
	want := map[string]string{
		"web": "PlacementPolicy demo/web-split | " + reportStrategy,
		"api": "Namespace demo | capacity=spot",
		"own": "Deployment demo/own | " + reportStrategy,
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: %q, want %q", name, got[name], w)
		}
	}
}
