//go:build e2e

package e2e

import (
	"context"
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

// waitRound waits until the loop of p, just started, has made one round over every
// revision in the cluster: it leads (once its predecessor's Lease is free), it queued
// every current revision at once when it started leading, and its queue is empty after
// a pass.
// An out-of-scope revision it took for in scope would have been passed in that round,
// and an unplaced pod of it evicted at once.
func waitRound(ctx context.Context, t *testing.T, p *harness.Serve) {
	t.Helper()
	const m = "custom_kube_scheduler_webhook_"
	var leader, passes, depth float64
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		ms, err := p.Metrics(ctx)
		if err != nil {
			return false, nil
		}
		leader, passes, depth = ms.Sum(m+"converge_leader", nil), ms.Sum(m+"converge_revision_passes_total", nil), ms.Sum(m+"converge_queue_depth", nil)
		return leader == 1 && passes >= 1 && depth == 0, nil
	})
	if err != nil {
		t.Fatalf("the restarted loop made no round: leader %v, passes %v, queue depth %v", leader, passes, depth)
	}
}

// The convergence loop acts only where the API server sends pods to the webhook. With
// the chart's default scope (opt-in), three workloads carry a strategy in namespaces
// that are not enabled, each in its own way: an annotated Deployment, an un-annotated
// one a ClusterPlacementPolicy without a namespaceSelector selects, and one under its
// Namespace's default. Their pods are admitted unplaced; the loop evicts none of them
// (their UIDs stay, the eviction count stays: through their pods' admissions and a
// round of the loop, restarted, over every revision), the policy's status says InScope
// False naming the namespace, and a control workload in an enabled namespace stays
// exact. Once the namespaces are labelled, the loop moves the three to their exact split.
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
	// The loop saw every pod's admission and change; then, restarted, one round (its
	// evictions count from 0 again).
	restart := time.Now()
	if err := conv.Stop(); err != nil {
		t.Fatal(err)
	}
	stopped := time.Since(restart)
	// The stopped leader released its Lease before it exited, so the restarted process
	// leads at once instead of after the Lease lapses.
	if pid := leaderPID(ctx); pid != 0 {
		t.Errorf("the stopped convergence leader left its Lease held (by pid %d), want it released", pid)
	}
	if err := conv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	started := time.Since(restart)
	waitRound(ctx, t, conv)
	t.Logf("MEASURED restarted loop: stopped %s, ready %s, round done %s after the stop began", stopped.Round(100*time.Millisecond), started.Round(100*time.Millisecond), time.Since(restart).Round(100*time.Millisecond))
	evicted := loopEvictions(ctx, t, conv)
	if ok, why := exactNow(ctx, control, "control", fallbackStrategy, 4); !ok {
		t.Errorf("the control workload in an enabled namespace is not exact: %s", why)
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
			t.Errorf("%s/%s: %d of %d pods replaced in a namespace that is not enabled; want none", w.ns, w.name, replaced, len(list.Items))
		}
	}
	if evicted != 0 {
		t.Errorf("the loop evicted %v pods; want 0 (only out-of-scope workloads were off their target)", evicted)
	}
	for _, w := range out {
		if n := len(auditEvictions(t, w.ns)); n != 0 {
			t.Errorf("the API server's audit log holds %d evictions by the webhook in %s, a namespace that is not enabled", n, w.ns)
		}
	}
	t.Logf("out of scope through the admissions and a round of the loop: 0 pods replaced in 3 workloads, 0 evictions")
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
