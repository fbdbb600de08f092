//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/api/v1alpha1"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// policyNamespace creates a test namespace through newNamespace, then labels it for
// the webhook (opt-in scope) and with extra labels, and annotates it with a default
// strategy when def is set.
func policyNamespace(ctx context.Context, t *testing.T, name string, labels map[string]string, def string) string {
	t.Helper()
	ns := newNamespace(ctx, t, name)
	all := map[string]any{strategy.LabelNamespaceEnabled: "true"}
	for k, v := range labels {
		all[k] = v
	}
	meta := map[string]any{"labels": all}
	if def != "" {
		meta["annotations"] = map[string]any{strategy.AnnotationStrategy: def}
	}
	patchNamespace(ctx, t, ns, meta)
	return ns
}

func dynamicClient(t *testing.T) dynamic.Interface {
	t.Helper()
	dyn, err := dynamic.NewForConfig(env.hc.Config)
	if err != nil {
		t.Fatal(err)
	}
	return dyn
}

// createPolicy creates a PlacementPolicy (ns set) or ClusterPlacementPolicy, deleted
// when the test ends.
func createPolicy(ctx context.Context, t *testing.T, dyn dynamic.Interface, ns, name string, spec map[string]any) error {
	t.Helper()
	kind, res := v1alpha1.KindClusterPlacementPolicy, dyn.Resource(v1alpha1.ClusterPlacementPolicies)
	var ri dynamic.ResourceInterface = res
	if ns != "" {
		kind, ri = v1alpha1.KindPlacementPolicy, dyn.Resource(v1alpha1.PlacementPolicies).Namespace(ns)
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(), "kind": kind,
		"metadata": map[string]any{"name": name, "namespace": ns}, "spec": spec,
	}}
	if _, err := ri.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		return err
	}
	t.Cleanup(func() { _ = ri.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	return nil
}

// unannotated is a Deployment without any strategy annotation, labelled app=name.
func unannotated(ns, name string, replicas int) *appsv1.Deployment {
	d := deployment(ns, name, "", replicas, false)
	d.Annotations = nil
	d.Labels = map[string]string{"app": name}
	return d
}

// TestPolicies: a namespace default, a namespaced policy and a cluster policy each
// split an un-annotated Deployment exactly, by the precedence rule (the namespaced
// policy over the namespace default); a workload's annotation overrides a policy; an
// invalid policy is refused at apply with the grammar's message.
func TestPolicies(t *testing.T) {
	ctx := context.Background()
	dyn := dynamicClient(t)

	// 1. The namespace default alone.
	nsDefault := policyNamespace(ctx, t, "e2e-policy-default", nil, capacityStrategy)
	createDeployment(ctx, t, unannotated(nsDefault, "plain", 5))

	// 2. A PlacementPolicy over the namespace's own default (seedStrategy).
	nsPolicy := policyNamespace(ctx, t, "e2e-policy-namespaced", nil, seedStrategy)
	if err := createPolicy(ctx, t, dyn, nsPolicy, "web-split", map[string]any{
		"strategy": capacityStrategy, "selector": map[string]any{"matchLabels": map[string]any{"app": "web"}}, "kinds": []any{"Deployment"},
	}); err != nil {
		t.Fatalf("creating the PlacementPolicy: %v", err)
	}
	createDeployment(ctx, t, unannotated(nsPolicy, "web", 5))

	// 3. A ClusterPlacementPolicy selecting namespaces by label; a Deployment there with
	// its own annotation keeps it.
	nsCluster := policyNamespace(ctx, t, "e2e-policy-cluster", map[string]string{"e2e-policy": "cluster"}, "")
	if err := createPolicy(ctx, t, dyn, "", "e2e-spot-split", map[string]any{
		"strategy": capacityStrategy, "namespaceSelector": map[string]any{"matchLabels": map[string]any{"e2e-policy": "cluster"}},
	}); err != nil {
		t.Fatalf("creating the ClusterPlacementPolicy: %v", err)
	}
	createDeployment(ctx, t, unannotated(nsCluster, "api", 5))
	createDeployment(ctx, t, deployment(nsCluster, "own", seedStrategy, 5, false))

	// An invalid policy is refused at apply, with the annotation's message.
	err := createPolicy(ctx, t, dyn, nsPolicy, "broken", map[string]any{"strategy": "spot=1,weight=x"})
	if err == nil || !strings.Contains(err.Error(), `term 1 ("spot=1,weight=x"): weight "x" is not a non-negative integer`) {
		t.Errorf("an invalid policy must be refused with the grammar's message, got %v", err)
	}
	// So is an invalid namespace default.
	bad := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "e2e-policy-bad-default", Annotations: map[string]string{strategy.AnnotationStrategy: "nolabel"}}}
	if _, err := env.client.CoreV1().Namespaces().Create(ctx, bad, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err == nil || !strings.Contains(err.Error(), "CustomPodScheduleStrategy on Namespace e2e-policy-bad-default is invalid") {
		t.Errorf("an invalid namespace default must be refused, got %v", err)
	}

	for _, c := range []struct{ ns, name, strat string }{
		{nsDefault, "plain", capacityStrategy},
		{nsPolicy, "web", capacityStrategy},
		{nsCluster, "api", capacityStrategy},
		{nsCluster, "own", seedStrategy},
	} {
		counts := assertExactSpread(ctx, t, c.strat, settled(ctx, t, c.ns, c.name, 5))
		t.Logf("%s/%s: per-term %v (strategy %s)", c.ns, c.name, counts, c.strat)
	}
}

// TestPolicyEditConverges: a PlacementPolicy governing two Deployments is edited; the
// convergence loop moves both to the new target, never more than one pod of each
// unavailable at once (CONVERGE_MAX_UNAVAILABLE 10% of 8, at least 1). Deleting the
// policy then moves nothing, and a new pod is left unplaced.
func TestPolicyEditConverges(t *testing.T) {
	ctx := context.Background()
	dyn := dynamicClient(t)
	ns := policyNamespace(ctx, t, "e2e-policy-edit", nil, "")
	startConverger(ctx, t, "converge-policy", 12)
	const replicas = 8
	if err := createPolicy(ctx, t, dyn, ns, "split", map[string]any{"strategy": capacityStrategy}); err != nil {
		t.Fatalf("creating the PlacementPolicy: %v", err)
	}
	names := []string{"alpha", "beta"}
	for _, name := range names {
		createDeployment(ctx, t, unannotated(ns, name, replicas))
	}
	for _, name := range names {
		assertExactSpread(ctx, t, capacityStrategy, settled(ctx, t, ns, name, replicas))
	}

	const next = "karpenter.sh/capacity-type=on-demand,base=1,weight=1:karpenter.sh/capacity-type=spot,weight=1"
	// One of beta's pods that the edit moves carries Karpenter's do-not-disrupt: the
	// loop moves the others and leaves it where it is until the annotation goes.
	pinned := pinMovingPod(ctx, t, ns, "beta", capacityStrategy, next, replicas)
	var watchers []*budgetWatcher
	for _, name := range names {
		watchers = append(watchers, watchBudget(ctx, ns, name, replicas))
	}
	patch := []byte(`{"spec":{"strategy":"` + next + `"}}`)
	if _, err := dyn.Resource(v1alpha1.PlacementPolicies).Namespace(ns).Patch(ctx, "split", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("editing the policy: %v", err)
	}
	for i, name := range names {
		if name == "beta" {
			waitStaying(ctx, t, ns, name, pinned)
			setDoNotDisrupt(ctx, t, pinned, "")
		}
		took := waitExact(ctx, t, ns, name, next, replicas, 4*time.Minute)
		maxUnavailable, at := watchers[i].stop()
		t.Logf("MEASURED policy edited -> %s exact: %s; most pods unavailable at once: %d", name, took.Round(time.Second), maxUnavailable)
		if maxUnavailable > 1 {
			t.Errorf("%s: %d pods unavailable at once while converging, the budget allows 1: %s", name, maxUnavailable, at)
		}
		assertExactSpread(ctx, t, next, settled(ctx, t, ns, name, replicas))
	}

	// Deleted: pods stay where they are; a new pod is admitted without a seat.
	if err := dyn.Resource(v1alpha1.PlacementPolicies).Namespace(ns).Delete(ctx, "split", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting the policy: %v", err)
	}
	before := podNames(settled(ctx, t, ns, "alpha", replicas))
	scaleDeployment(ctx, t, ns, "alpha", replicas+1)
	pods := settled(ctx, t, ns, "alpha", replicas+1)
	unplaced := 0
	for _, p := range pods {
		if _, seated := p.Annotations[strategy.AnnotationSeat]; !seated {
			unplaced++
			continue
		}
		if !before[p.Name] {
			t.Errorf("pod %s, new after the policy was deleted, was placed", p.Name)
		}
	}
	if unplaced != 1 {
		t.Errorf("%d unplaced pods after scaling up without a policy, want the 1 new one", unplaced)
	}
	for name := range before {
		found := false
		for _, p := range pods {
			found = found || p.Name == name
		}
		if !found {
			t.Errorf("pod %s was moved after its policy was deleted", name)
		}
	}
}

// policyCondition polls a policy's status (a PlacementPolicy in ns, or with ns "" a
// ClusterPlacementPolicy) until its condition typ has status want, and returns the
// condition's message.
func policyCondition(ctx context.Context, t *testing.T, dyn dynamic.Interface, ns, name, typ, want string) string {
	t.Helper()
	var msg, last string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		var ri dynamic.ResourceInterface = dyn.Resource(v1alpha1.ClusterPlacementPolicies)
		if ns != "" {
			ri = dyn.Resource(v1alpha1.PlacementPolicies).Namespace(ns)
		}
		u, err := ri.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		last = fmt.Sprint(conds)
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == typ && m["status"] == want {
				msg, _ = m["message"].(string)
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("policy %s/%s: condition %s never %s; conditions %s", ns, name, typ, want, last)
	}
	return msg
}

// TestPolicyStatusConflictAndInvalid: two policies of one priority matching a
// Deployment resolve by name and both report the conflict in status; a policy that
// slips in invalid (validation off) reports the parser's message in status, and its
// workload's pods are admitted unchanged, with an Event saying why.
func TestPolicyStatusConflictAndInvalid(t *testing.T) {
	ctx := context.Background()
	dyn := dynamicClient(t)
	ns := policyNamespace(ctx, t, "e2e-policy-status", nil, "")
	startConverger(ctx, t, "converge-policy-status", 14)
	sel := func(app string) map[string]any { return map[string]any{"matchLabels": map[string]any{"app": app}} }
	if err := createPolicy(ctx, t, dyn, ns, "aa-first", map[string]any{"strategy": capacityStrategy, "selector": sel("web")}); err != nil {
		t.Fatal(err)
	}
	if err := createPolicy(ctx, t, dyn, ns, "zz-second", map[string]any{"strategy": seedStrategy, "selector": sel("web")}); err != nil {
		t.Fatal(err)
	}
	// Validation off while the broken policy goes in.
	unregister(env.client)
	var err error
	// The API server stops calling the webhook once its watch sees the configuration go.
	_ = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err = createPolicy(ctx, t, dyn, ns, "broken", map[string]any{"strategy": "spot=1,weight=x", "selector": sel("api")})
		return err == nil || !strings.Contains(err.Error(), "denied the request"), nil
	})
	if rerr := env.register(ctx, "full"); rerr != nil {
		t.Fatalf("registering the webhook again: %v", rerr)
	}
	if err != nil {
		t.Fatalf("creating the invalid policy with validation off: %v", err)
	}
	createDeployment(ctx, t, unannotated(ns, "web", 4))
	createDeployment(ctx, t, unannotated(ns, "api", 2))

	assertExactSpread(ctx, t, capacityStrategy, settled(ctx, t, ns, "web", 4))
	for _, name := range []string{"aa-first", "zz-second"} {
		msg := policyCondition(ctx, t, dyn, ns, name, v1alpha1.ConditionConflicting, "True")
		t.Logf("%s Conflicting: %s", name, msg)
		if !strings.Contains(msg, "Deployment "+ns+"/web") {
			t.Errorf("%s: the conflict does not name the workload: %s", name, msg)
		}
	}
	// The winner governs web, which is exact: workloads 1, exact 1.
	var counts string
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		u, err := dyn.Resource(v1alpha1.PlacementPolicies).Namespace(ns).Get(ctx, "aa-first", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		workloads, _, _ := unstructured.NestedInt64(u.Object, "status", "workloads")
		exact, _, _ := unstructured.NestedInt64(u.Object, "status", "exact")
		counts = fmt.Sprintf("workloads %d, exact %d", workloads, exact)
		return workloads == 1 && exact == 1, nil
	}); err != nil {
		t.Errorf("aa-first status: %s, want workloads 1, exact 1", counts)
	}
	t.Logf("aa-first status: %s", counts)
	msg := policyCondition(ctx, t, dyn, ns, "broken", v1alpha1.ConditionAccepted, "False")
	if !strings.Contains(msg, `weight "x" is not a non-negative integer`) {
		t.Errorf("the invalid policy's status lacks the parser's message: %s", msg)
	}
	for _, p := range settled(ctx, t, ns, "api", 2) {
		if _, seated := p.Annotations[strategy.AnnotationSeat]; seated || len(p.Spec.NodeSelector) > 0 {
			t.Errorf("pod %s of a workload under an invalid policy was changed: seat %q, nodeSelector %v", p.Name, p.Annotations[strategy.AnnotationSeat], p.Spec.NodeSelector)
		}
	}
	var ev []string
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		ev = eventsWith(ctx, t, ns, "api", "InvalidStrategy")
		return len(ev) > 0 && strings.Contains(ev[0], "PlacementPolicy "+ns+"/broken"), nil
	}); err != nil {
		t.Errorf("no InvalidStrategy Event naming the policy on Deployment api: %q", ev)
	}
}

// pinMovingPod gives karpenter.sh/do-not-disrupt=true to one settled pod of the
// Deployment whose seat strategy from places on another term than strategy to.
func pinMovingPod(ctx context.Context, t *testing.T, ns, name, from, to string, replicas int) corev1.Pod {
	t.Helper()
	was, err := strategy.Parse(from)
	if err != nil {
		t.Fatal(err)
	}
	will, err := strategy.Parse(to)
	if err != nil {
		t.Fatal(err)
	}
	before, after := was.Place(replicas, nil), will.Place(replicas, nil)
	for _, p := range settled(ctx, t, ns, name, replicas) {
		seat, ok := strategy.SeatOf(&p)
		if ok && seat <= replicas && before.Terms[seat-1] != after.Terms[seat-1] {
			setDoNotDisrupt(ctx, t, p, "true")
			return p
		}
	}
	t.Fatalf("no pod of %s/%s changes term from %q to %q", ns, name, from, to)
	return corev1.Pod{}
}

// setDoNotDisrupt sets Karpenter's do-not-disrupt annotation on p to value ("": removed).
func setDoNotDisrupt(ctx context.Context, t *testing.T, p corev1.Pod, value string) {
	t.Helper()
	v := "null"
	if value != "" {
		v = `"` + value + `"`
	}
	patch := []byte(`{"metadata":{"annotations":{"` + karpv1.DoNotDisruptAnnotationKey + `":` + v + `}}}`)
	if _, err := env.client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("annotating pod %s: %v", p.Name, err)
	}
}

// waitStaying waits until spread counts the pinned pod as the one pod the loop leaves
// off its term and no repair is pending, then checks the pod was never evicted and the
// workload was told why.
func waitStaying(ctx context.Context, t *testing.T, ns, name string, pinned corev1.Pod) {
	t.Helper()
	var last map[string]any
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		last = spreadJSON(ctx, t, ns, name)
		return last["doNotDisrupt"] == float64(1) && last["pendingRepairs"] == float64(0), nil
	})
	if err != nil {
		t.Fatalf("%s/%s: spread never showed the do-not-disrupt pod as the only one off its term: %v", ns, name, last)
	}
	p, err := env.client.CoreV1().Pods(ns).Get(ctx, pinned.Name, metav1.GetOptions{})
	if err != nil || p.UID != pinned.UID || p.DeletionTimestamp != nil {
		t.Fatalf("the do-not-disrupt pod %s was evicted (%v)", pinned.Name, err)
	}
	said := false
	for _, msg := range eventsWith(ctx, t, ns, name, "ConvergeBlocked") {
		said = said || strings.Contains(msg, pinned.Name) && strings.Contains(msg, karpv1.DoNotDisruptAnnotationKey)
	}
	if !said {
		t.Errorf("%s/%s: no ConvergeBlocked Event names the do-not-disrupt pod %s", ns, name, pinned.Name)
	}
}
