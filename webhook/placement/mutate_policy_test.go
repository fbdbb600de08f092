package placement

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/api/v1alpha1"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/policy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook/internal/webhooktest"
)

// TestPolicyPlacesUnannotatedWorkload: a Deployment without a strategy takes its
// PlacementPolicy's (over the namespace default); an invalid policy admits its pods
// unchanged, with a warning and an Event naming the policy.
func TestPolicyPlacesUnannotatedWorkload(t *testing.T) {
	for _, tc := range []struct {
		name, strat, want string
	}{
		{"valid", "a=1:b=2", ""},
		{"invalid", "nolabel", "CustomPodScheduleStrategy on PlacementPolicy shop/split is invalid, pod not placed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, rec, _ := newAnnotatedCluster(nil).mutator(t)
			pol := v1alpha1.PlacementPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "split"}, Spec: v1alpha1.PlacementPolicySpec{Strategy: tc.strat}}
			ns := corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNS, Annotations: map[string]string{strategy.AnnotationStrategy: "c=1"}}}
			m.Resolver.(*clusterview.ListerResolver).Policies = policy.NewIndex([]v1alpha1.PlacementPolicy{pol}, nil, []corev1.Namespace{ns})
			req := webhooktest.CreateRequest(t, webhooktest.RSPod(testNS, testRSUID))
			resp := m.Admit(context.Background(), req)
			if !resp.Allowed {
				t.Fatalf("blocked: %+v", resp.Result)
			}
			if tc.want == "" {
				pod := applyPatch(t, req, resp)
				if pod.Spec.NodeSelector["b"] != "2" { // seat 1 of a=1:b=2 is term 2's
					t.Fatalf("not placed by the policy: nodeSelector %v, warnings %q", pod.Spec.NodeSelector, resp.Warnings)
				}
				// The placement is counted under the strategy's source.
				if n := counter(t, m.Metrics, "placements_total", map[string]string{"term": "b=2", "source": "PlacementPolicy"}); n != 1 {
					t.Fatalf("placements_total{term=b=2,source=PlacementPolicy} = %v, want 1", n)
				}
				return
			}
			if resp.Patch != nil || !strings.Contains(strings.Join(resp.Warnings, "\n"), tc.want) {
				t.Fatalf("patch %s, warnings %q; want unchanged with %q", resp.Patch, resp.Warnings, tc.want)
			}
			if e := <-rec.Events; !strings.Contains(e, tc.want) {
				t.Fatalf("event %q", e)
			}
		})
	}
}
