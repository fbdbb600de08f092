//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/api/v1alpha1"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/harness"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/report"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// typoStrategy has a typo in its spot term's label key: nothing offers capcity-type.
const (
	typoStrategy = "karpenter.sh/capacity-type=on-demand,base=1,weight=1:karpenter.sh/capcity-type=spot,weight=3"
	typoTerm     = "karpenter.sh/capcity-type=spot"
	didYouMean   = `did you mean "karpenter.sh/capacity-type"?`
)

// Mistakes are loud, as a platform team makes them: a typo'd label key is refused at
// apply naming the right key, and when it slips in anyway (validation off) the workload
// is never reported exact: spread says "fallback" with the likely typo and exits 4, the
// loop counts the term in terms_unserved (its alert's metric). A strategy-like
// annotation key is warned; a policy whose selector has a typo says in status that it
// governs nothing; a Namespace default and a cluster policy where the webhook is not
// sent are warned at apply.
func TestMistakesAreLoud(t *testing.T) {
	ctx := context.Background()
	client, warned, cfg := warningClient(t)
	dyn := dynamicClient(t)
	ns := policyNamespace(ctx, t, "e2e-mistakes", nil, "")
	off := newNamespaceLabelled(ctx, t, "e2e-mistakes-off", map[string]string{"e2e-mistakes": "off"})
	loop := startConverger(ctx, t, "mistakes", 18)

	// Apply time: refused, naming the closest key that exists.
	typo := deployment(ns, "typo", typoStrategy, 0, true)
	_, err := client.AppsV1().Deployments(ns).Create(ctx, typo, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), didYouMean) || !strings.Contains(err.Error(), typoTerm) {
		t.Fatalf("a typo'd label key at apply: want a refusal naming %q, got %v", didYouMean, err)
	}
	if err := createPolicy(ctx, t, dyn, ns, "typo-term", map[string]any{"strategy": typoStrategy, "selector": map[string]any{"matchLabels": map[string]any{"app": "x"}}}); err == nil || !strings.Contains(err.Error(), didYouMean) {
		t.Errorf("a typo'd label key in a PlacementPolicy: want a refusal naming %q, got %v", didYouMean, err)
	}

	// A strategy-like annotation key is warned (and the Deployment admitted).
	lookalike := deployment(ns, "lookalike", "", 0, false)
	lookalike.Annotations = map[string]string{"CustomPodSchedulingStrategy": capacityStrategy}
	if _, err := client.AppsV1().Deployments(ns).Create(ctx, lookalike, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a Deployment with a strategy-like key: %v", err)
	}
	if w := warned.all(); !strings.Contains(w, `annotation "CustomPodSchedulingStrategy" is not read; did you mean "CustomPodScheduleStrategy"?`) {
		t.Errorf("a strategy-like annotation key: no warning naming the key, got %q", w)
	}

	// Where the webhook is not sent: a Namespace default and a cluster policy selecting
	// only that namespace are warned.
	if _, err := client.CoreV1().Namespaces().Patch(ctx, off, types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+strategy.AnnotationStrategy+`":"`+capacityStrategy+`"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("annotating namespace %s: %v", off, err)
	}
	if w := warned.all(); !strings.Contains(w, "the default strategy of Namespace "+off+" governs nothing: namespace "+off+" is not enabled") {
		t.Errorf("a Namespace default where the webhook is not sent: no warning, got %q", w)
	}
	clusterPolicy := map[string]any{"strategy": capacityStrategy, "selector": map[string]any{"matchLabels": map[string]any{"app": "x"}},
		"namespaceSelector": map[string]any{"matchLabels": map[string]any{"e2e-mistakes": "off"}}}
	warnedCluster := &warnings{}
	cfg.WarningHandler = warnedCluster
	if err := createPolicy(ctx, t, dynamicClientWith(t, cfg), "", "e2e-mistakes-off", clusterPolicy); err != nil {
		t.Fatalf("creating the cluster policy: %v", err)
	}
	if w := warnedCluster.all(); !strings.Contains(w, "ClusterPlacementPolicy e2e-mistakes-off governs nothing: none of the namespaces it selects ("+off+") is enabled") {
		t.Errorf("a cluster policy selecting only a namespace not enabled: no warning, got %q", w)
	}

	// A typo'd selector: accepted, but status says it governs nothing.
	createDeployment(ctx, t, unannotated(ns, "web", 0))
	if err := createPolicy(ctx, t, dyn, ns, "typo-selector", map[string]any{"strategy": capacityStrategy, "selector": map[string]any{"matchLabels": map[string]any{"ap": "web"}}}); err != nil {
		t.Fatalf("creating a policy with a typo'd selector: %v", err)
	}
	msg := policyCondition(ctx, t, dyn, ns, "typo-selector", v1alpha1.ConditionGoverning, "False")
	if !strings.Contains(msg, "check spec.selector") {
		t.Errorf("a typo'd selector: Governing=False says %q", msg)
	}
	policyCondition(ctx, t, dyn, ns, "typo-selector", v1alpha1.ConditionReady, "False")

	// The typo slips in with validation off: the pods are never reported exact.
	unregister(env.client)
	_ = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err = env.client.AppsV1().Deployments(ns).Create(ctx, typo, metav1.CreateOptions{})
		return err == nil || !strings.Contains(err.Error(), "denied the request"), nil
	})
	if rerr := env.register(ctx, "full"); rerr != nil {
		t.Fatalf("registering the webhook again: %v", rerr)
	}
	if err != nil {
		t.Fatalf("creating the typo'd Deployment with validation off: %v", err)
	}
	scaleDeployment(ctx, t, ns, "typo", 4)
	var r report.Report
	var code int
	var out, stderr string
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		out, stderr, code = cli(ctx, t, nil, "spread", "-n", ns, "deployment/typo", "-o", "json")
		if json.Unmarshal([]byte(out), &r) != nil || len(r.Workloads) != 1 {
			return false, nil
		}
		placed := 0
		for _, term := range r.Workloads[0].Terms {
			placed += term.Placed
		}
		return placed == 4, nil
	}); err != nil {
		t.Fatalf("spread of the typo'd Deployment never counted 4 placed pods (exit %d):\n%s%s", code, out, stderr)
	}
	w := r.Workloads[0]
	if w.Exact || w.State != string(strategy.StateFallback) || !strings.Contains(w.Why, typoTerm) || !strings.Contains(w.Why, didYouMean) || code != 4 {
		t.Errorf("spread of the typo'd Deployment: exact %v, state %q, why %q, exit %d; want fallback naming %q, exit 4", w.Exact, w.State, w.Why, code, didYouMean)
	}
	var unserved float64
	if err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		ms, err := loop.Metrics(ctx)
		if err != nil {
			return false, nil
		}
		unserved = ms.Sum("custom_kube_scheduler_webhook_terms_unserved", harness.Labels{"term": typoTerm})
		return unserved >= 1, nil
	}); err != nil {
		t.Errorf("terms_unserved{term=%q} = %v on the loop, want 1", typoTerm, unserved)
	}
	table, _, _ := cli(ctx, t, nil, "spread", "-n", ns, "deployment/typo")
	if !strings.Contains(table, "NOT exact (fallback: ") {
		t.Errorf("spread's table does not say fallback:\n%s", table)
	}
	t.Logf("spread of the typo'd Deployment (exit %d):\n%s", code, table)
}

// dynamicClientWith is dynamicClient with another rest config (a warning handler).
func dynamicClientWith(t *testing.T, cfg *rest.Config) dynamic.Interface {
	t.Helper()
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return dyn
}
