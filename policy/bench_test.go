package policy

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/api/v1alpha1"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// BenchmarkAppendLinks: the lookup admission does per pod, with 200 policies in the
// cluster (180 namespaced elsewhere, 20 in the workload's namespace of which the last
// by priority matches, and none) and a namespace default.
func BenchmarkAppendLinks(b *testing.B) {
	var namespaced []v1alpha1.PlacementPolicy
	for i := range 180 {
		namespaced = append(namespaced, pp(fmt.Sprintf("other-%d", i%30), fmt.Sprintf("p%d", i), "a=1", 0, map[string]string{"app": "x"}))
	}
	for i := range 20 {
		namespaced = append(namespaced, pp("shop", fmt.Sprintf("shop-%02d", i), "a=1", int32(20-i), map[string]string{"app": fmt.Sprintf("app-%d", i)}))
	}
	idx := NewIndex(namespaced, nil, []corev1.Namespace{namespace("shop", nil, "b=1"), namespace("quiet", nil, "")})
	for _, bc := range []struct {
		name string
		w    Workload
	}{
		{"no policy in the namespace", Workload{Namespace: "quiet", Kind: "Deployment", Labels: map[string]string{"app": "web"}}},
		{"20 in the namespace, the last matches", Workload{Namespace: "shop", Kind: "Deployment", Labels: map[string]string{"app": "app-19"}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			buf := make([]strategy.AnnotatedObject, 0, 4)
			b.ReportAllocs()
			for b.Loop() {
				buf = idx.AppendLinks(buf[:0], bc.w)
			}
		})
	}
}
