//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
	moving, free := movingPods(t, strat, pods, replicas)
	return len(moving) + free
}

// movingPods names the pods wouldMove counts: those whose seat strat places on another
// term; free is the seats no pod holds.
func movingPods(t *testing.T, strat string, pods []corev1.Pod, replicas int) (moving []string, free int) {
	t.Helper()
	s, err := strategy.Parse(strat)
	if err != nil {
		t.Fatal(err)
	}
	target := s.Seats(replicas)
	held := map[int]bool{}
	for _, p := range pods {
		seat, ok := strategy.SeatOf(&p)
		if !ok || seat > replicas || held[seat] {
			continue
		}
		held[seat] = true
		if strategy.TermOf(s, &p) != target[seat-1] {
			moving = append(moving, p.Name)
		}
	}
	return moving, replicas - len(held)
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

	// The what-if of enforcing it names the same moves, per workload, and exits 3.
	manifest := filepath.Join(t.TempDir(), "next.yaml")
	policyYAML := fmt.Sprintf("apiVersion: %s\nkind: %s\nmetadata: {name: next, namespace: %s}\nspec:\n  strategy: %q\n  mode: Enforce\n  selector: {matchLabels: {tier: audited}}\n",
		v1alpha1.GroupVersion, v1alpha1.KindPlacementPolicy, ns, next)
	if err := os.WriteFile(manifest, []byte(policyYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := cli(ctx, t, nil, "plan", "--cluster", "-f", manifest, "-o", "json")
	var whatIf struct {
		Workloads []struct {
			Name   string
			Before struct{ Source string }
			After  struct{ Source string }
			Moves  int
		}
		Moves int
	}
	if err := json.Unmarshal([]byte(out), &whatIf); err != nil {
		t.Fatalf("plan -f policy: exit %d, %v\n%s\n%s", code, err, out, stderr)
	}
	t.Logf("MEASURED plan --cluster -f (Enforce version): exit %d, %d moves %+v", code, whatIf.Moves, whatIf.Workloads)
	if code != 3 || whatIf.Moves != want || len(whatIf.Workloads) != len(names) {
		t.Errorf("plan -f policy: exit %d, %d moves over %d workloads; want exit 3, %d moves over %d", code, whatIf.Moves, len(whatIf.Workloads), want, len(names))
	}
	for _, w := range whatIf.Workloads {
		if w.Moves != per[w.Name] || w.Before.Source != "Namespace "+ns || w.After.Source != "PlacementPolicy "+ns+"/next" {
			t.Errorf("plan -f policy, %s: %+v; want %d moves from the namespace default to the policy", w.Name, w, per[w.Name])
		}
	}

	// Enforce: exactly the pods the audit and the what-if named move.
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
	if e != float64(want) || e != float64(whatIf.Moves) {
		t.Errorf("enforcing evicted %v pods for the strategy, the audit said %d would move, plan -f %d", e, want, whatIf.Moves)
	}
}

// TestPolicyPauseAndStop: a policy enforced while suspended moves nothing (each
// Deployment says why); resumed, its moves start, and the cluster-wide stop switch (the
// converge annotation on the webhook's namespace) halts them mid-way, said by the metric,
// spread and an Event; lifted, the moves finish exact, with as many strategy moves as
// the audit named. MAX_EVICTIONS_PER_MINUTE=4 paces the moves so the stop lands mid-way
// (at most two at once: each Deployment moves one pod at a time, its budget).
func TestPolicyPauseAndStop(t *testing.T) {
	ctx := context.Background()
	dyn := dynamicClient(t)
	ns := policyNamespace(ctx, t, "e2e-policy-pause", nil, capacityStrategy)
	conv := startConverger(ctx, t, "converge-pause", 42, "MAX_EVICTIONS_PER_MINUTE=4")
	const next = "karpenter.sh/capacity-type=on-demand,weight=1:karpenter.sh/capacity-type=spot,weight=1"
	const replicas = 8
	names := []string{"pause-a", "pause-b"}
	for _, name := range names {
		createDeployment(ctx, t, unannotated(ns, name, replicas))
	}
	want := 0
	for _, name := range names {
		pods := settled(ctx, t, ns, name, replicas)
		assertExactSpread(ctx, t, capacityStrategy, pods)
		want += wouldMove(t, next, pods, replicas)
	}
	if want <= 3 {
		t.Fatalf("the strategies move %d pods: too few for the stop to land mid-way", want)
	}
	strategyEvictions := func() float64 {
		ms, err := conv.Metrics(ctx)
		if err != nil {
			t.Fatalf("fetching metrics: %v", err)
		}
		by := ms.SumBy("custom_kube_scheduler_webhook_converge_evictions_total", "reason", harness.Labels{"result": "evicted"})
		return by["drift"] + by["unplaced"]
	}
	before := strategyEvictions()
	blockedWith := func(name, text string) {
		t.Helper()
		var seen []string
		if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			seen = eventsWith(ctx, t, ns, name, "ConvergeBlocked")
			for _, m := range seen {
				if strings.Contains(m, text) {
					return true, nil
				}
			}
			return false, nil
		}); err != nil {
			t.Fatalf("%s: no ConvergeBlocked Event saying %q: %q", name, text, seen)
		}
	}

	// Enforced but suspended: placed by it, moved by nothing.
	if err := createPolicy(ctx, t, dyn, ns, "paced", map[string]any{"strategy": next, "suspend": true}); err != nil {
		t.Fatalf("creating the suspended policy: %v", err)
	}
	for _, name := range names {
		blockedWith(name, "PlacementPolicy "+ns+"/paced is suspended")
	}
	if e := strategyEvictions() - before; e != 0 {
		t.Fatalf("%v evictions while the policy was suspended", e)
	}

	// Resumed: the moves start; the stop switch halts them.
	patchPolicy := func(body string) {
		t.Helper()
		if _, err := dyn.Resource(v1alpha1.PlacementPolicies).Namespace(ns).Patch(ctx, "paced", types.MergePatchType, []byte(body), metav1.PatchOptions{}); err != nil {
			t.Fatalf("patching the policy: %v", err)
		}
	}
	patchPolicy(`{"spec":{"suspend":false}}`)
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		return strategyEvictions()-before >= 1, nil
	}); err != nil {
		t.Fatal("no move after the policy was resumed")
	}
	patchNamespace(ctx, t, webhookNamespace, map[string]any{"annotations": map[string]any{strategy.AnnotationConverge: "false"}})
	lifted := false
	lift := func() {
		if !lifted {
			lifted = true
			patchNamespace(ctx, t, webhookNamespace, map[string]any{"annotations": map[string]any{strategy.AnnotationConverge: nil}})
		}
	}
	t.Cleanup(lift)
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return metricOf(ctx, t, conv, "custom_kube_scheduler_webhook_converge_moves_stopped") == 1, nil
	}); err != nil {
		t.Fatal("converge_moves_stopped never 1 after the stop switch was set")
	}
	atStop := strategyEvictions() - before
	t.Logf("MEASURED stop switch: %v of %d strategy moves done when the loop said it stopped", atStop, want)
	if atStop >= float64(want) {
		t.Fatalf("every move was done before the stop (%v of %d): nothing to halt", atStop, want)
	}
	var offTarget string
	for _, name := range names {
		if ok, _ := exactNow(ctx, ns, name, next, replicas); !ok {
			offTarget = name
		}
	}
	if offTarget == "" {
		t.Fatal("both Deployments are exact though moves are left")
	}
	blockedWith(offTarget, "every move of the convergence loop is stopped")
	if wl := spreadJSON(ctx, t, ns, offTarget); !strings.Contains(fmt.Sprint(wl["held"]), "every move of the convergence loop is stopped") {
		t.Errorf("spread of %s does not say moves are stopped: held %v", offTarget, wl["held"])
	}
	if e := strategyEvictions() - before; e != atStop {
		t.Errorf("%v strategy moves after the loop said it stopped (%v at the stop)", e-atStop, atStop)
	}

	// Lifted: the moves finish exact, as many as the audit's count.
	lift()
	for _, name := range names {
		took := waitExact(ctx, t, ns, name, next, replicas, 6*time.Minute)
		t.Logf("MEASURED resumed -> %s exact: %s", name, took.Round(time.Second))
	}
	if e := strategyEvictions() - before; e != float64(want) {
		t.Errorf("%v strategy moves in all, the count of what the policy moves is %d", e, want)
	}
}
