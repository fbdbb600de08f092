//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/api/v1alpha1"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/harness"
)

// TestPolicyPace: a ClusterPlacementPolicy enforced over six Deployments in two
// namespaces (their namespace default placed them). plan --cluster -f names the pods
// enforcing it moves, as the test counts them; the loop evicts them all, and the
// Deployments end exact on it. At no time were more of the loop's evictions in flight
// (their pod Ready on a node, no Ready replacement yet) than the pace allows:
// CONVERGE_MAX_UNAVAILABLE_CLUSTER=3 across the two namespaces, _PER_NAMESPACE=2 in
// each, while each Deployment's own budget is 1; measured from the API server's audit
// log against the replacements the test's watch saw Ready.
func TestPolicyPace(t *testing.T) {
	ctx := context.Background()
	dyn := dynamicClient(t)
	const clusterPace, namespacePace, replicas = 3, 2, 4
	const next = "karpenter.sh/capacity-type=on-demand,base=1,weight=1:karpenter.sh/capacity-type=spot,weight=1"
	selector := map[string]string{"e2e-pace": "on"}
	namespaces := []string{
		policyNamespace(ctx, t, "e2e-pace-a", selector, capacityStrategy),
		policyNamespace(ctx, t, "e2e-pace-b", selector, capacityStrategy),
	}
	conv := startConverger(ctx, t, "converge-pace", 70,
		fmt.Sprintf("CONVERGE_MAX_UNAVAILABLE_CLUSTER=%d", clusterPace), fmt.Sprintf("CONVERGE_MAX_UNAVAILABLE_PER_NAMESPACE=%d", namespacePace))
	names := []string{"pace-1", "pace-2", "pace-3"}
	var watches []*soakWatch
	for _, ns := range namespaces {
		w, err := startSoakWatch(ctx, ns)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		watches = append(watches, w)
		for _, name := range names {
			createDeployment(ctx, t, unannotated(ns, name, replicas))
		}
	}
	want := map[string]bool{} // namespace/pod: what the test's own count moves
	for _, ns := range namespaces {
		for _, name := range names {
			pods := settled(ctx, t, ns, name, replicas)
			assertExactSpread(ctx, t, capacityStrategy, pods)
			moving, free := movingPods(t, next, pods, replicas)
			if free != 0 {
				t.Fatalf("%s/%s: %d seats free while settled", ns, name, free)
			}
			for _, p := range moving {
				want[ns+"/"+p] = true
			}
		}
	}
	if len(want) <= clusterPace {
		t.Fatalf("the strategies move %d pods: too few for the pace to matter", len(want))
	}
	// The check counts an evicted pod only once it had been Ready for budgetSlack (the
	// loop may not have seen it Ready before): wait until every pod has been.
	if err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(context.Context) (bool, error) {
		for _, w := range watches {
			w.mu.Lock()
			for _, p := range w.pods {
				if !p.readySince.IsZero() && time.Since(p.readySince) < budgetSlack+time.Second {
					w.mu.Unlock()
					return false, nil
				}
			}
			w.mu.Unlock()
		}
		return true, nil
	}); err != nil {
		t.Fatalf("the pods did not stay Ready for %s", budgetSlack)
	}

	// The what-if names exactly those pods.
	manifest := filepath.Join(t.TempDir(), "pace.yaml")
	policyYAML := fmt.Sprintf("apiVersion: %s\nkind: %s\nmetadata: {name: e2e-pace}\nspec:\n  strategy: %q\n  namespaceSelector: {matchLabels: {e2e-pace: \"on\"}}\n",
		v1alpha1.GroupVersion, v1alpha1.KindClusterPlacementPolicy, next)
	if err := os.WriteFile(manifest, []byte(policyYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := cli(ctx, t, nil, "plan", "--cluster", "-f", manifest, "-o", "json")
	var whatIf struct {
		Workloads []struct {
			Namespace string
			Pods      []string
		}
		Moves int
	}
	if err := json.Unmarshal([]byte(out), &whatIf); err != nil {
		t.Fatalf("plan -f policy: exit %d, %v\n%s\n%s", code, err, out, stderr)
	}
	named := map[string]bool{}
	for _, w := range whatIf.Workloads {
		for _, p := range w.Pods {
			named[w.Namespace+"/"+p] = true
		}
	}
	t.Logf("MEASURED plan --cluster -f: exit %d, %d moves over %d workloads, %d pods named; the test's own count %d", code, whatIf.Moves, len(whatIf.Workloads), len(named), len(want))
	if code != 3 || whatIf.Moves != len(want) || !sameKeys(named, want) {
		t.Errorf("plan -f policy: exit %d, %d moves, pods %v; want exit 3, %d moves, pods %v", code, whatIf.Moves, keys(named), len(want), keys(want))
	}

	changed := time.Now()
	if err := createPolicy(ctx, t, dyn, "", "e2e-pace", map[string]any{
		"strategy": next, "namespaceSelector": map[string]any{"matchLabels": map[string]any{"e2e-pace": "on"}},
	}); err != nil {
		t.Fatalf("creating the policy: %v", err)
	}
	for _, ns := range namespaces {
		for _, name := range names {
			waitExact(ctx, t, ns, name, next, replicas, 3*time.Minute)
		}
	}
	t.Logf("MEASURED policy applied -> six Deployments exact: %s", time.Since(changed).Round(time.Second))

	// Every eviction of the loop since, against the Ready replacements: in flight per
	// namespace, and across both (one key for all).
	var evictions, across []loopEviction
	var ready, readyAcross []readyPod
	evicted := map[string]bool{}
	for i, ns := range namespaces {
		w := watches[i]
		w.mu.Lock()
		pods := map[types.UID]podSeen{}
		for uid, p := range w.pods {
			pods[uid] = *p
		}
		w.mu.Unlock()
		for _, a := range auditEvictionsOf(t, ns) {
			if a.At.Before(changed) {
				continue
			}
			evicted[ns+"/"+a.Pod] = true
			e := loopEviction{ID: string(a.UID), Pod: ns + "/" + a.Pod, Workload: ns, Revision: ns, At: a.At, ReadySince: pods[a.UID].readySince}
			evictions = append(evictions, e)
			e.Revision = "cluster"
			across = append(across, e)
		}
		for uid, p := range pods {
			if !p.readySince.IsZero() && !p.created.Before(changed.Truncate(time.Second)) {
				ready = append(ready, readyPod{ID: string(uid), Revision: ns, Ready: p.readySince})
				readyAcross = append(readyAcross, readyPod{ID: string(uid), Revision: "cluster", Ready: p.readySince})
			}
		}
	}
	sort.Slice(ready, func(i, j int) bool { return ready[i].Ready.Before(ready[j].Ready) })
	sort.Slice(readyAcross, func(i, j int) bool { return readyAcross[i].Ready.Before(readyAcross[j].Ready) })
	perNamespace, overNamespace := checkEvictionBudget(evictions, ready, nil, func(string) int { return namespacePace })
	cluster, overCluster := checkEvictionBudget(across, readyAcross, nil, func(string) int { return clusterPace })
	ms, err := conv.Metrics(ctx)
	if err != nil {
		t.Fatalf("fetching metrics: %v", err)
	}
	by := ms.SumBy("custom_kube_scheduler_webhook_converge_evictions_total", "reason", harness.Labels{"result": "evicted"})
	paced := 0
	for _, ns := range namespaces {
		for _, name := range names {
			for _, m := range eventsWith(ctx, t, ns, name, "ConvergeBlocked") {
				if strings.Contains(m, "pace") {
					paced++
				}
			}
		}
	}
	t.Logf("MEASURED pace: %d evictions in the audit log (%d of Ready pods), loop by reason %v; most in flight at once: across both namespaces %d (pace %d), %s %d, %s %d (pace %d); %d ConvergeBlocked Events naming the pace",
		len(across), cluster["cluster"].Costly, by, cluster["cluster"].MaxInFlight, clusterPace,
		namespaces[0], inFlight(perNamespace, namespaces[0]), namespaces[1], inFlight(perNamespace, namespaces[1]), namespacePace, paced)
	for _, line := range append(overCluster, overNamespace...) {
		t.Errorf("over the pace: %s", line)
	}
	for p := range want {
		if !evicted[p] {
			t.Errorf("pod %s, which the what-if named, was not evicted", p)
		}
	}
}

func inFlight(uses map[string]*budgetUse, key string) int {
	if u := uses[key]; u != nil {
		return u.MaxInFlight
	}
	return 0
}

func sameKeys(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
