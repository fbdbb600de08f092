//go:build bench

package bench

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/api/v1alpha1"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/harness"
)

// createPolicies puts n placement policies into the cluster before serve starts, as a
// platform team's cluster would hold them: a tenth are PlacementPolicies of the bench's
// namespace and the rest ClusterPlacementPolicies for other tenants' namespaces. None
// selects the bench's workloads (their annotation would win anyway): every admission
// still looks them up, which is the cost measured.
func createPolicies(ctx context.Context, c *harness.Cluster, n int) error {
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	local := n / 10
	for i := range n {
		spec := map[string]any{
			"strategy": burstStrategy,
			"priority": int64(i),
			"selector": map[string]any{"matchLabels": map[string]any{"bench-policy": fmt.Sprintf("p%d", i)}},
		}
		kind, ri := v1alpha1.KindClusterPlacementPolicy, dynamic.ResourceInterface(dyn.Resource(v1alpha1.ClusterPlacementPolicies))
		ns := ""
		if i < local {
			ns = withNS
			kind, ri = v1alpha1.KindPlacementPolicy, dyn.Resource(v1alpha1.PlacementPolicies).Namespace(ns)
		} else {
			spec["namespaceSelector"] = map[string]any{"matchLabels": map[string]any{"bench-tenant": fmt.Sprintf("t%d", i)}}
		}
		name := fmt.Sprintf("bench-%d", i)
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": v1alpha1.GroupVersion.String(), "kind": kind,
			"metadata": map[string]any{"name": name, "namespace": ns}, "spec": spec,
		}}
		if _, err := ri.Apply(ctx, name, obj, metav1.ApplyOptions{FieldManager: "bench", Force: true}); err != nil {
			return fmt.Errorf("applying %s %s: %w", kind, name, err)
		}
	}
	return nil
}
