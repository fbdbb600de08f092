//go:build e2e

package e2e

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/api/v1alpha1"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/harness"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// outOfScopeWatch is how long the loop is watched leaving namespaces that are not
// enabled alone: the loop it replaces evicted such pods within seconds, round after
// round (63 pods per 4-replica Deployment in 150 s, one every 2.4 s), and a pass moves
// an unplaced pod at once, so 40 s would see a dozen. E2E_SCOPE_WATCH overrides it.
func outOfScopeWatch(t *testing.T) time.Duration {
	if v := os.Getenv("E2E_SCOPE_WATCH"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("E2E_SCOPE_WATCH: %v", err)
		}
		return d
	}
	return 40 * time.Second
}

// The convergence loop acts only where the API server sends pods to the webhook. With
// the chart's default scope (opt-in), three workloads carry a strategy in namespaces
// that are not enabled, each in its own way: an annotated Deployment, an un-annotated
// one a ClusterPlacementPolicy without a namespaceSelector selects, and one under its
// Namespace's default. Their pods are admitted unplaced; the loop evicts none of them
// (their UIDs stay, the eviction count stays), the policy's status says InScope False
// naming the namespace, and a control workload in an enabled namespace stays exact.
// Once the namespaces are labelled, the loop moves the three to their exact split.
func TestLoopActsOnlyInScope(t *testing.T) {
	ctx := context.Background()
	if err := env.register(ctx, "full"); err != nil {
		t.Fatal(err)
	}
	dyn := dynamicClient(t)
	conv := startConverger(ctx, t, "converge-scope", 10)

	annotated := newNamespaceLabelled(ctx, t, "e2e-out-annotated", nil)
	byPolicy := newNamespaceLabelled(ctx, t, "e2e-out-policy", nil)
	byDefault := newNamespaceLabelled(ctx, t, "e2e-out-default", nil)
	control := newNamespace(ctx, t, "e2e-in-control")
	patchNamespace(ctx, t, byDefault, map[string]any{"annotations": map[string]any{strategy.AnnotationStrategy: fallbackStrategy}})
	if err := createPolicy(ctx, t, dyn, "", "e2e-out-cluster", map[string]any{
		"strategy": fallbackStrategy,
		"selector": map[string]any{"matchLabels": map[string]any{"app": "shop-out"}},
	}); err != nil {
		t.Fatalf("creating the ClusterPlacementPolicy: %v", err)
	}
	type workload struct{ ns, name string }
	out := []workload{{annotated, "web"}, {byPolicy, "shop-out"}, {byDefault, "plain"}}
	createDeployment(ctx, t, deployment(annotated, "web", fallbackStrategy, 4, false))
	createDeployment(ctx, t, unannotated(byPolicy, "shop-out", 4))
	createDeployment(ctx, t, unannotated(byDefault, "plain", 4))
	createDeployment(ctx, t, deployment(control, "control", fallbackStrategy, 4, false))

	uids := map[workload]map[types.UID]bool{}
	for _, w := range out {
		uids[w] = map[types.UID]bool{}
		for _, p := range settled(ctx, t, w.ns, w.name, 4) {
			if _, seated := strategy.SeatOf(&p); seated {
				t.Fatalf("pod %s/%s carries a seat in a namespace that is not enabled", p.Namespace, p.Name)
			}
			uids[w][p.UID] = true
		}
	}
	settled(ctx, t, control, "control", 4)
	evictedBefore := loopEvictions(ctx, t, conv)

	watch := outOfScopeWatch(t)
	deadline := time.Now().Add(watch)
	for time.Now().Before(deadline) {
		if ok, why := exactNow(ctx, control, "control", fallbackStrategy, 4); !ok && why != "" {
			t.Errorf("the control workload in an enabled namespace is not exact: %s", why)
		}
		time.Sleep(5 * time.Second)
	}
	for _, w := range out {
		list, err := env.client.CoreV1().Pods(w.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + w.name})
		if err != nil {
			t.Fatal(err)
		}
		replaced := 0
		for _, p := range list.Items {
			if !uids[w][p.UID] {
				replaced++
			}
		}
		if replaced > 0 || len(list.Items) != 4 {
			t.Errorf("%s/%s: %d of %d pods replaced in %s in a namespace that is not enabled; want none", w.ns, w.name, replaced, len(list.Items), watch)
		}
	}
	if n := loopEvictions(ctx, t, conv) - evictedBefore; n != 0 {
		t.Errorf("the loop evicted %v pods in %s; want 0 (only out-of-scope workloads were off their target)", n, watch)
	}
	for _, w := range out {
		if n := len(auditEvictions(t, w.ns)); n != 0 {
			t.Errorf("the API server's audit log holds %d evictions by the webhook in %s, a namespace that is not enabled", n, w.ns)
		}
	}
	t.Logf("out of scope for %s: 0 pods replaced in 3 workloads, 0 evictions", watch)
	// The policy says that it governs nothing there, and why.
	msg := policyCondition(ctx, t, dyn, "", "e2e-out-cluster", v1alpha1.ConditionInScope, "False")
	if !strings.Contains(msg, byPolicy) || !strings.Contains(msg, "not enabled") {
		t.Errorf("InScope condition %q: want it to name namespace %s as not enabled", msg, byPolicy)
	}

	// Enabled: the loop splits them exactly.
	start := time.Now()
	for _, ns := range []string{annotated, byPolicy, byDefault} {
		patchNamespace(ctx, t, ns, map[string]any{"labels": map[string]any{strategy.LabelNamespaceEnabled: "true"}})
	}
	for _, w := range out {
		var why string
		err := wait.PollUntilContextTimeout(ctx, 2*time.Second, settleTimeout, true, func(ctx context.Context) (bool, error) {
			var ok bool
			ok, why = exactNow(ctx, w.ns, w.name, fallbackStrategy, 4)
			return ok, nil
		})
		if err != nil {
			t.Errorf("%s/%s not exact %s after its namespace was enabled: %s", w.ns, w.name, settleTimeout, why)
		}
	}
	t.Logf("enabled: the three workloads exact %.0fs after the label", time.Since(start).Seconds())
	policyCondition(ctx, t, dyn, "", "e2e-out-cluster", v1alpha1.ConditionInScope, "True")
}

// patchNamespace merge-patches the namespace's metadata with meta.
func patchNamespace(ctx context.Context, t *testing.T, ns string, meta map[string]any) {
	t.Helper()
	raw, err := (&unstructured.Unstructured{Object: map[string]any{"metadata": meta}}).MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, raw, metav1.PatchOptions{}); err != nil {
		t.Fatalf("patching namespace %s: %v", ns, err)
	}
}

// loopEvictions is the loop's count of pods it evicted, every reason.
func loopEvictions(ctx context.Context, t *testing.T, p *harness.Serve) float64 {
	t.Helper()
	ms, err := p.Metrics(ctx)
	if err != nil {
		t.Fatalf("fetching metrics: %v", err)
	}
	return ms.Sum("custom_kube_scheduler_webhook_converge_evictions_total", harness.Labels{"result": "evicted"})
}
