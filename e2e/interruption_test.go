//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/converge"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/awsfake"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/harness"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/interruption"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/providerid"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/unavailability"
)

// The scenario: one on-demand pod, the spot seats 3:1 over two spot pools.
const (
	signalsStrategy = "karpenter.sh/capacity-type=on-demand,base=1:nodesize=spot4vcpu16gb,weight=3:nodesize=spot8vcpu32gb,weight=1"
	spot4Term       = "nodesize=spot4vcpu16gb"
	spot8Term       = "nodesize=spot8vcpu32gb"
	signalsWindow   = 2 * time.Minute
	signalsAccount  = "000000000000"
	signalsRegion   = "eu-west-1"
	signalsReplicas = 40
)

// rebalanceEvent is an EventBridge rebalance recommendation for a node of the local
// cluster: kwok's providerID kwok://<name> makes the node name its instance id.
func rebalanceEvent(id, instance string, at time.Time) string {
	return fmt.Sprintf(`{"version":"0","id":%q,"detail-type":"EC2 Instance Rebalance Recommendation","source":"aws.ec2","account":%q,"time":%q,"region":%q,"resources":[],"detail":{"instance-id":%q}}`,
		id, signalsAccount, at.UTC().Format(time.RFC3339), signalsRegion, instance)
}

// startSignalsConverger serves a local SQS endpoint from the test process and starts a
// converger reading its queue, with a short window and the suite's cool-down.
func startSignalsConverger(ctx context.Context, t *testing.T, extraEnv ...string) (*harness.Serve, *awsfake.SQS) {
	t.Helper()
	fake := awsfake.NewSQS(signalsAccount)
	srv := httptest.NewServer(fake)
	fake.URL = srv.URL
	url := fake.CreateQueue("cksw-signals")
	dir := t.TempDir()
	settings := append([]string{
		"INTERRUPTION_QUEUE=" + url, "INTERRUPTION_WINDOW=" + signalsWindow.String(),
		"AWS_ACCESS_KEY_ID=AKIDTEST", "AWS_SECRET_ACCESS_KEY=secret", "AWS_SESSION_TOKEN=", "AWS_REGION=" + signalsRegion,
		"AWS_PROFILE=", "AWS_CONFIG_FILE=" + filepath.Join(dir, "config"), "AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(dir, "credentials"),
		"AWS_EC2_METADATA_DISABLED=true", "AWS_ENDPOINT_URL=", "AWS_ENDPOINT_URL_SQS=" + srv.URL,
	}, extraEnv...)
	p := startConverger(ctx, t, "converge-signals", 12, settings...)
	// Registered after the converger's Cleanup: runs before it, so the server's Close
	// would wait for the converger's long poll; the poll gives up with the process.
	t.Cleanup(func() {
		if err := p.Stop(); err != nil {
			t.Logf("stopping the converger: %v", err)
		}
		srv.Close()
	})
	return p, fake
}

// metricSum scrapes p and sums the series of name with labels.
func metricSum(ctx context.Context, t *testing.T, p *harness.Serve, name string, labels harness.Labels) float64 {
	t.Helper()
	ms, err := p.Metrics(ctx)
	if err != nil {
		t.Fatalf("fetching metrics: %v", err)
	}
	return ms.Sum(name, labels)
}

// waitMetric polls until name{labels} on p reaches at least want.
func waitMetric(ctx context.Context, t *testing.T, p *harness.Serve, name string, labels harness.Labels, want float64, timeout time.Duration) {
	t.Helper()
	var got float64
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		ms, err := p.Metrics(ctx)
		if err != nil {
			return false, nil
		}
		got = ms.Sum(name, labels)
		return got >= want, nil
	})
	if err != nil {
		t.Fatalf("%s%v is %v after %s, want >= %v", name, labels, got, timeout, want)
	}
}

// livePods lists the Deployment's pods not being deleted, by UID.
func livePods(ctx context.Context, t *testing.T, ns, app string) map[types.UID]corev1.Pod {
	t.Helper()
	list, err := env.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		t.Fatalf("listing pods: %v", err)
	}
	out := map[types.UID]corev1.Pod{}
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out[p.UID] = p
		}
	}
	return out
}

// auditEvictions reads the API server's audit log (the webhook's ServiceAccount, at
// Metadata level: scripts/localcluster/up.sh) and returns the times of the evictions of
// pods in ns it answered 201, sorted.
func auditEvictions(t *testing.T, ns string) []time.Time {
	t.Helper()
	var out []time.Time
	for _, e := range auditEvictionsOf(t, ns) {
		out = append(out, e.At)
	}
	return out
}

// auditEviction is one eviction in the audit log: the pod's name, its UID when the
// eviction names it (the loop's do, in their preconditions) and when the API server
// received it.
type auditEviction struct {
	Pod string
	UID types.UID
	At  time.Time
}

// auditEvictionsOf is auditEvictions with the pods' names.
func auditEvictionsOf(t *testing.T, ns string) []auditEviction {
	t.Helper()
	f, err := os.Open(filepath.Join(env.dir, "logs", "audit.jsonl"))
	if err != nil {
		t.Fatalf("opening the audit log: %v", err)
	}
	defer f.Close()
	var out []auditEviction
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e struct {
			Stage     string `json:"stage"`
			Verb      string `json:"verb"`
			ObjectRef struct {
				Resource, Namespace, Name, Subresource string
			} `json:"objectRef"`
			ResponseStatus struct {
				Code int `json:"code"`
			} `json:"responseStatus"`
			Received      time.Time `json:"requestReceivedTimestamp"`
			RequestObject struct {
				DeleteOptions struct {
					Preconditions struct {
						UID types.UID `json:"uid"`
					} `json:"preconditions"`
				} `json:"deleteOptions"`
			} `json:"requestObject"`
		}
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Stage != "ResponseComplete" || e.Verb != "create" ||
			e.ObjectRef.Resource != "pods" || e.ObjectRef.Subresource != "eviction" || e.ObjectRef.Namespace != ns || e.ResponseStatus.Code != 201 {
			continue
		}
		out = append(out, auditEviction{Pod: e.ObjectRef.Name, UID: e.RequestObject.DeleteOptions.Preconditions.UID, At: e.Received})
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading the audit log: %v", err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out
}

// atRiskRecord reads the revision's unavailability record; nil while there is none.
func atRiskRecord(ctx context.Context, rsUID types.UID) *unavailability.Record {
	lease, err := env.client.CoordinationV1().Leases(webhookNamespace).Get(ctx, unavailability.RecordName(rsUID), metav1.GetOptions{})
	if err != nil {
		return nil
	}
	rec, err := unavailability.DecodeRecord(lease)
	if err != nil {
		return nil
	}
	return rec
}

// sortByPods orders nodes by the pods podsOnNode counts on them, most first, then by name.
func sortByPods(nodes []string, podsOnNode map[string]int) {
	sort.Slice(nodes, func(i, j int) bool {
		if podsOnNode[nodes[i]] != podsOnNode[nodes[j]] {
			return podsOnNode[nodes[i]] > podsOnNode[nodes[j]]
		}
		return nodes[i] < nodes[j]
	})
}

// waitAtRisk waits (a minute at most) until the record of the ReplicaSet rsUID marks the
// spot4 term (term 2) at risk, logs that term's state and returns the record.
func waitAtRisk(ctx context.Context, t *testing.T, rsUID types.UID) *unavailability.Record {
	t.Helper()
	var rec *unavailability.Record
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		rec = atRiskRecord(ctx, rsUID)
		return rec != nil && rec.Terms[1].Risk != nil, nil
	}); err != nil {
		t.Fatalf("the spot4 term was never marked at risk")
	}
	st := rec.Terms[1]
	t.Logf("record: term 2 until %s: %s; evidence %+v", st.Until.Format(time.RFC3339), st.Reason, *st.Risk)
	return rec
}

// Rebalance recommendations for most nodes of one spot pool: the term is marked at risk
// with the evidence in its record, new pods go to the fallback, the pods of the
// signalled nodes move within the budget (counted in the API server's audit log), the
// other pool's pods stay; once the signals are quiet for the cool-down the pods return
// and the spread is exact again. Before that, a single recommendation with the per-node
// option off changes nothing.
func TestInterruptionSignalsMoveATermAtRisk(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(ctx, t, "e2e-signals")
	conv, queue := startSignalsConverger(ctx, t)
	waitServed(ctx, t, ns, signalsStrategy)

	// One CPU a pod: the spot4 pool (4 vCPU nodes) needs several nodes, so "most of its
	// nodes" is several nodes, and the budget (10% of 40: 4) limits how fast they empty.
	d := deployment(ns, "signals", signalsStrategy, signalsReplicas, true)
	d.Spec.Template.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("1")
	createDeployment(ctx, t, d)
	assertExactSpread(ctx, t, signalsStrategy, settled(ctx, t, ns, "signals", signalsReplicas))
	rs := replicaSetOf(ctx, t, ns, d)
	before := livePods(ctx, t, ns, "signals")
	allNodes := nodes(ctx, t)
	podsOnNode := map[string]int{}
	spot8Before := map[types.UID]string{}
	for uid, p := range before {
		podsOnNode[p.Spec.NodeName]++
		if p.Spec.NodeSelector["nodesize"] == "spot8vcpu32gb" {
			spot8Before[uid] = p.Name
		}
	}
	var pool []string // the spot4 pool's nodes, those with this workload's pods first
	for name, n := range allNodes {
		if n.Labels["nodesize"] == "spot4vcpu16gb" {
			pool = append(pool, name)
		}
	}
	sortByPods(pool, podsOnNode)
	if len(pool) < 3 {
		t.Fatalf("the spot4 pool has %d nodes; the test needs several", len(pool))
	}
	instance := func(node string) string {
		id, ok := providerid.InstanceID(allNodes[node].Spec.ProviderID)
		if !ok {
			t.Fatalf("node %s: providerID %q names no instance", node, allNodes[node].Spec.ProviderID)
		}
		return id
	}
	m := func(name string, labels harness.Labels) float64 { return metricSum(ctx, t, conv, name, labels) }
	const p = "custom_kube_scheduler_webhook_"

	// A single recommendation, per-node option off: seen and counted, nothing else.
	lone := pool[0]
	if _, err := queue.Send("cksw-signals", rebalanceEvent("lone", instance(lone), time.Now())); err != nil {
		t.Fatal(err)
	}
	// The pass that saw the signal says so on the workload; a mark or a per-node move
	// would have been decided in that same pass.
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return len(eventsWith(ctx, t, ns, "signals", converge.ReasonInterruptionSignal)) > 0, nil
	}); err != nil {
		t.Fatalf("no %s Event for the workload's pods on %s", converge.ReasonInterruptionSignal, lone)
	}
	waitMetric(ctx, t, conv, p+"interruption_nodes_at_risk", harness.Labels{"term": spot4Term}, 1, time.Minute)
	if got := m(p+"interruption_term_at_risk", harness.Labels{"term": spot4Term}); got != 0 {
		t.Fatalf("one recommendation on one node: interruption_term_at_risk %v", got)
	}
	if rec := atRiskRecord(ctx, rs.UID); rec != nil {
		t.Fatalf("one recommendation on one node marked a term: %+v", rec.Terms)
	}
	if got := livePods(ctx, t, ns, "signals"); len(got) != signalsReplicas || !sameUIDs(got, before) {
		t.Fatalf("one recommendation with the per-node option off changed the pods")
	}
	if ev := m(p+"converge_evictions_total", harness.Labels{"result": "evicted"}); ev != 0 {
		t.Fatalf("%v evictions after one recommendation", ev)
	}
	t.Logf("single recommendation on %s (%d of the workload's pods), per-node option off: no mark, no eviction", lone, podsOnNode[lone])

	// Recommendations for most of the pool's nodes, delivered with a duplicate, garbage
	// and an instance of no node of the cluster.
	warnedCount := int(math.Ceil(0.75 * float64(len(pool))))
	warned := map[string]bool{}
	onWarned := 0
	for _, n := range pool[:warnedCount] {
		warned[n] = true
		onWarned += podsOnNode[n]
	}
	signalled := time.Now()
	for i, n := range pool[:warnedCount] {
		if _, err := queue.Send("cksw-signals", rebalanceEvent(fmt.Sprintf("wave-%d", i), instance(n), time.Now())); err != nil {
			t.Fatal(err)
		}
	}
	for _, body := range []string{rebalanceEvent("wave-0", instance(pool[0]), time.Now()), "not an event", rebalanceEvent("nowhere", "i-0123456789abcdef0", time.Now())} {
		if _, err := queue.Send("cksw-signals", body); err != nil {
			t.Fatal(err)
		}
	}
	watcher := watchBudget(ctx, ns, "signals", signalsReplicas)

	rec := waitAtRisk(ctx, t, rs.UID)
	marked := time.Since(signalled)
	st := rec.Terms[1]
	if st.Risk.SignalledNodes < warnedCount || st.Risk.Nodes < len(pool) || st.Risk.ByKind[string(interruption.KindRebalance)] < warnedCount {
		t.Errorf("evidence %+v, want at least %d of %d nodes signalled by rebalance recommendations", *st.Risk, warnedCount, len(pool))
	}
	for term := range rec.Terms {
		if term != 1 {
			t.Errorf("term %d marked too: %+v", term+1, rec.Terms[term])
		}
	}

	// The moves: every pod of the signalled nodes, and none other, through the eviction
	// budget; their replacements on the fallback (the other spot pool).
	var state string
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		left := 0
		for _, pod := range livePods(ctx, t, ns, "signals") {
			if warned[pod.Spec.NodeName] && pod.Spec.NodeSelector["nodesize"] == "spot4vcpu16gb" {
				left++
			}
		}
		_, why := exactNow(ctx, ns, "signals", signalsStrategy, signalsReplicas)
		state = fmt.Sprintf("%d pods left on signalled nodes; %s", left, why)
		return left == 0 && len(livePods(ctx, t, ns, "signals")) == signalsReplicas && allRunning(ctx, ns, "signals"), nil
	}); err != nil {
		t.Fatalf("the pods of the signalled nodes did not move: %s", state)
	}
	moved := time.Since(signalled)
	now := livePods(ctx, t, ns, "signals")
	fallback := 0
	for uid, pod := range now {
		if _, was := before[uid]; was {
			if warned[before[uid].Spec.NodeName] && before[uid].Spec.NodeSelector["nodesize"] == "spot4vcpu16gb" {
				t.Errorf("pod %s is still on signalled node %s", pod.Name, pod.Spec.NodeName)
			}
			continue
		}
		if pod.Annotations[strategy.AnnotationFallbackFrom] != "2" || pod.Spec.NodeSelector["nodesize"] != "spot8vcpu32gb" {
			t.Errorf("new pod %s: nodeSelector %v, fallback-from %q; want the fallback term (spot8) from term 2", pod.Name, pod.Spec.NodeSelector, pod.Annotations[strategy.AnnotationFallbackFrom])
		}
		fallback++
	}
	for uid, name := range spot8Before {
		if _, ok := now[uid]; !ok {
			t.Errorf("pod %s of the other spot pool was moved", name)
		}
	}
	for uid, pod := range before {
		if _, ok := now[uid]; !ok && !(warned[pod.Spec.NodeName] && pod.Spec.NodeSelector["nodesize"] == "spot4vcpu16gb") {
			t.Errorf("pod %s on %s (not signalled) was moved", pod.Name, pod.Spec.NodeName)
		}
	}
	if fallback != onWarned {
		t.Errorf("%d new pods on the fallback, want the %d pods that ran on the signalled nodes", fallback, onWarned)
	}
	if msgs := eventsWith(ctx, t, ns, "signals", converge.ReasonTermAtRisk); len(msgs) == 0 {
		t.Errorf("no %s Event", converge.ReasonTermAtRisk)
	} else {
		t.Logf("%s: %s", converge.ReasonTermAtRisk, msgs[0])
	}
	for name, want := range map[string]float64{
		p + "interruption_messages_total":       float64(warnedCount + 4),
		p + "terms_marked_at_risk_total":        1,
		p + "interruption_term_at_risk":         1,
		p + "interruption_nodes_at_risk":        float64(warnedCount),
		p + "interruption_signals_total":        float64(warnedCount + 1),
		p + "converge_evictions_total":          float64(onWarned),
		p + "interruption_receive_errors_total": 0,
	} {
		labels := harness.Labels{}
		switch name {
		case p + "interruption_term_at_risk", p + "interruption_nodes_at_risk", p + "interruption_signals_total", p + "terms_marked_at_risk_total":
			labels["term"] = spot4Term
		case p + "converge_evictions_total":
			labels["reason"], labels["result"] = converge.MoveInterruption, "evicted"
		}
		got := m(name, labels)
		if (name == p+"interruption_receive_errors_total" && got != 0) || got < want {
			t.Errorf("%s%v = %v, want %v", name, labels, got, want)
		}
	}
	for result, want := range map[string]float64{"duplicate": 1, "malformed": 1, "unknown-instance": 1} {
		if got := m(p+"interruption_messages_total", harness.Labels{"result": result}); got != want {
			t.Errorf("messages_total{result=%s} = %v, want %v", result, got, want)
		}
	}
	if got := m(p+"interruption_signals_total", harness.Labels{"term": spot8Term}); got != 0 {
		t.Errorf("signals counted for the other pool's term: %v", got)
	}
	if queue.Messages("cksw-signals") != 0 {
		t.Errorf("%d messages left in the queue: every one is handled and deleted once", queue.Messages("cksw-signals"))
	}
	maxUnavailable, at := watcher.stop()
	// Every eviction the API server answered is in its audit log; the loop's metric says
	// why each was made. The pods of the signalled nodes are the interruption moves; the
	// ReplicaSet's churn may add a seat-above-replicas move (a replacement admitted while
	// its evicted pod still held a seat).
	evicted := func() map[string]float64 {
		ms, err := conv.Metrics(ctx)
		if err != nil {
			t.Fatalf("fetching metrics: %v", err)
		}
		return ms.SumBy(p+"converge_evictions_total", "reason", harness.Labels{"result": "evicted"})
	}
	total := func(by map[string]float64) int {
		n := 0.0
		for _, v := range by {
			n += v
		}
		return int(n)
	}
	movedBy := evicted()
	movedEvictions := auditEvictions(t, ns)
	budget, _ := converge.Budget(intstr.FromString("10%"), signalsReplicas)
	t.Logf("MEASURED interruption: %d of the pool's %d nodes signalled, %d pods on them; signal -> mark %s, -> all moved %s; %d evictions in the audit log, by reason %v; most pods unavailable at once %d (budget %d)",
		warnedCount, len(pool), onWarned, marked.Round(time.Second), moved.Round(time.Second), len(movedEvictions), movedBy, maxUnavailable, budget)
	if int(movedBy[converge.MoveInterruption]) != onWarned {
		t.Errorf("%v interruption evictions, want %d (the pods of the signalled nodes)", movedBy[converge.MoveInterruption], onWarned)
	}
	if len(movedEvictions) != total(movedBy) {
		t.Errorf("the audit log holds %d evictions in %s, the loop counts %d (%v)", len(movedEvictions), ns, total(movedBy), movedBy)
	}
	if maxUnavailable > budget {
		t.Errorf("%d pods unavailable at once, the budget is %d: %s", maxUnavailable, budget, at)
	}

	// Quiet: the mark ends a cool-down after the last signal, then the pods return, the
	// canary first, and the spread is exact again. (The return's Events may be dropped
	// by client-go's spam filter, 25 per object: the metric says when it starts.)
	watcher = watchBudget(ctx, ns, "signals", signalsReplicas)
	waitMetric(ctx, t, conv, p+"converge_evictions_total", harness.Labels{"reason": converge.MoveReturn, "result": "evicted"}, 1, fallbackCooldown+2*time.Minute)
	returned := time.Since(signalled)
	exactAfter := waitExact(ctx, t, ns, "signals", signalsStrategy, signalsReplicas, 6*time.Minute)
	exact := time.Since(signalled)
	maxUnavailable, at = watcher.stop()
	all := auditEvictions(t, ns)
	allBy := evicted()
	var returnAudit []time.Time
	for _, at := range all {
		if !at.Before(st.Until.Add(-time.Second)) {
			returnAudit = append(returnAudit, at)
		}
	}
	t.Logf("MEASURED return: last signal -> first return eviction %s (cool-down %s), -> exact %s (%s after the return started); audit log: %d evictions in all, %d since the mark ended; loop by reason %v; most pods unavailable at once %d (budget %d)",
		returned.Round(time.Second), fallbackCooldown, exact.Round(time.Second), exactAfter.Round(time.Second), len(all), len(returnAudit), allBy, maxUnavailable, budget)
	// EventBridge times have second precision: the last signal's own time is signalled
	// truncated to the second, and the cool-down runs from it.
	if sinceEventTime := returned + signalled.Sub(signalled.Truncate(time.Second)); sinceEventTime < fallbackCooldown {
		t.Errorf("the return started %s after the last signal's time, before the cool-down (%s)", sinceEventTime, fallbackCooldown)
	}
	if int(allBy[converge.MoveReturn]) != onWarned {
		t.Errorf("%v return evictions, want %d (each fallback pod once)", allBy[converge.MoveReturn], onWarned)
	}
	if len(all) != total(allBy) {
		t.Errorf("the audit log holds %d evictions in %s, the loop counts %d (%v)", len(all), ns, total(allBy), allBy)
	}
	if maxUnavailable > budget {
		t.Errorf("%d pods unavailable at once during the return, the budget is %d: %s", maxUnavailable, budget, at)
	}
	if rec := atRiskRecord(ctx, rs.UID); rec != nil && rec.Terms[1].Active(time.Now()) {
		t.Errorf("term 2 still at risk after the return: %+v", rec.Terms[1])
	}
	assertExactSpread(ctx, t, signalsStrategy, settled(ctx, t, ns, "signals", signalsReplicas))
}

func sameUIDs(a, b map[types.UID]corev1.Pod) bool {
	if len(a) != len(b) {
		return false
	}
	for uid := range a {
		if _, ok := b[uid]; !ok {
			return false
		}
	}
	return true
}

// allRunning reports whether every live pod of app is Running and Ready.
func allRunning(ctx context.Context, ns, app string) bool {
	list, err := env.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		return false
	}
	for _, p := range list.Items {
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || !podReady(p) {
			return false
		}
	}
	return true
}
