//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/api/v1alpha1"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/harness"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// wouldMove is the test's own count of what enforcing strat moves in a workload: its
// live pods whose seat strat places on another term, and seats no pod holds.
func wouldMove(t *testing.T, strat string, pods []corev1.Pod, replicas int) int {
	t.Helper()
	s, err := strategy.Parse(strat)
	if err != nil {
		t.Fatal(err)
	}
	target := s.Seats(replicas)
	held := map[int]bool{}
	n := 0
	for _, p := range pods {
		seat, ok := strategy.SeatOf(&p)
		if !ok || seat > replicas || held[seat] {
			continue
		}
		held[seat] = true
		if strategy.TermOf(s, &p) != target[seat-1] {
			n++
		}
	}
	return n + replicas - len(held)
}

// TestPolicyAudit: a PlacementPolicy in audit mode over three Deployments placed by
// their namespace default places nothing and evicts nothing (a scale-up's pod is placed
// by the default), while its status, the metric and spread name the pods it would move,
// as the test counts them; set to Enforce, the loop evicts exactly those pods and every
// Deployment ends exact on the policy.
func TestPolicyAudit(t *testing.T) {
	ctx := context.Background()
	dyn := dynamicClient(t)
	ns := policyNamespace(ctx, t, "e2e-policy-audit", nil, capacityStrategy)
	conv := startConverger(ctx, t, "converge-audit", 40)
	const next = "karpenter.sh/capacity-type=on-demand,base=1,weight=1:karpenter.sh/capacity-type=spot,weight=1"
	replicas := map[string]int{"audit-a": 4, "audit-b": 6, "audit-c": 8}
	names := []string{"audit-a", "audit-b", "audit-c"}
	for _, name := range names {
		d := unannotated(ns, name, replicas[name])
		d.Labels["tier"] = "audited"
		createDeployment(ctx, t, d)
	}
	for _, name := range names {
		assertExactSpread(ctx, t, capacityStrategy, settled(ctx, t, ns, name, replicas[name]))
	}
	// evicted counts the loop's evictions by reason: the strategy's moves (drift, and
	// unplaced pods) are what the audit predicts; a seat refilled above the replica count
	// (an admission that beat its cache to the evicted pod's deletion) is moved once more.
	evicted := func() map[string]float64 {
		ms, err := conv.Metrics(ctx)
		if err != nil {
			t.Fatalf("fetching metrics: %v", err)
		}
		return ms.SumBy("custom_kube_scheduler_webhook_converge_evictions_total", "reason", harness.Labels{"result": "evicted"})
	}
	strategyMoves := func(by map[string]float64) float64 { return by["drift"] + by["unplaced"] }
	all := func(by map[string]float64) float64 {
		n := 0.0
		for _, v := range by {
			n += v
		}
		return n
	}
	evictedBefore := evicted()

	if err := createPolicy(ctx, t, dyn, ns, "next", map[string]any{
		"strategy": next, "mode": "Audit", "selector": map[string]any{"matchLabels": map[string]any{"tier": "audited"}},
	}); err != nil {
		t.Fatalf("creating the audit policy: %v", err)
	}
	// Admission does not place by it: a new pod goes by the namespace default.
	replicas["audit-a"]++
	scaleDeployment(ctx, t, ns, "audit-a", replicas["audit-a"])
	assertExactSpread(ctx, t, capacityStrategy, settled(ctx, t, ns, "audit-a", replicas["audit-a"]))

	before := map[string]bool{}
	want, per := 0, map[string]int{}
	for _, name := range names {
		pods := settled(ctx, t, ns, name, replicas[name])
		for p := range podNames(pods) {
			before[p] = true
		}
		per[name] = wouldMove(t, next, pods, replicas[name])
		want += per[name]
	}
	if want == 0 {
		t.Fatal("the test's strategies move nothing: it would prove nothing")
	}
	var got string
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		u, err := dyn.Resource(v1alpha1.PlacementPolicies).Namespace(ns).Get(ctx, "next", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		workloads, _, _ := unstructured.NestedInt64(u.Object, "status", "workloads")
		moves, _, _ := unstructured.NestedInt64(u.Object, "status", "wouldMove")
		got = fmt.Sprintf("workloads %d, wouldMove %d", workloads, moves)
		return workloads == 3 && moves == int64(want), nil
	}); err != nil {
		t.Fatalf("audit policy status: %s, want workloads 3, wouldMove %d", got, want)
	}
	t.Logf("MEASURED audit: status %s; the test's own count %d (%v)", got, want, per)
	msg := policyCondition(ctx, t, dyn, ns, "next", v1alpha1.ConditionGoverning, "True")
	if m := metricOf(ctx, t, conv, "custom_kube_scheduler_webhook_audit_would_move_pods"); m != float64(want) {
		t.Errorf("audit_would_move_pods %v, want %d", m, want)
	}
	t.Logf("Governing: %s", msg)
	for _, name := range names {
		wl := spreadJSON(ctx, t, ns, name)
		audit, _ := wl["audit"].(map[string]any)
		if wl["source"] != "Namespace "+ns || audit == nil || audit["source"] != "PlacementPolicy "+ns+"/next" || audit["wouldMove"] != float64(per[name]) {
			t.Errorf("spread %s: source %v, audit %v; want the namespace default, and the policy moving %d", name, wl["source"], audit, per[name])
		}
	}
	// Nothing moved while in audit: the same pods, no eviction.
	for _, name := range names {
		for _, p := range settled(ctx, t, ns, name, replicas[name]) {
			if !before[p.Name] {
				t.Errorf("pod %s is new: something moved while the policy was in audit mode", p.Name)
			}
		}
	}
	if e := all(evicted()) - all(evictedBefore); e != 0 {
		t.Errorf("%v evictions while the policy was in audit mode, want 0", e)
	}

	// Enforce: exactly the pods the audit named move.
	patch := []byte(`{"spec":{"mode":"Enforce"}}`)
	if _, err := dyn.Resource(v1alpha1.PlacementPolicies).Namespace(ns).Patch(ctx, "next", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("enforcing the policy: %v", err)
	}
	for _, name := range names {
		took := waitExact(ctx, t, ns, name, next, replicas[name], 4*time.Minute)
		t.Logf("MEASURED enforced -> %s exact: %s", name, took.Round(time.Second))
		assertExactSpread(ctx, t, next, settled(ctx, t, ns, name, replicas[name]))
	}
	after := evicted()
	e := strategyMoves(after) - strategyMoves(evictedBefore)
	t.Logf("MEASURED enforce evicted %v pods for the strategy (the audit said %d), %v in all (%v)", e, want, all(after)-all(evictedBefore), after)
	if e != float64(want) {
		t.Errorf("enforcing evicted %v pods for the strategy, the audit said %d would move", e, want)
	}
}
