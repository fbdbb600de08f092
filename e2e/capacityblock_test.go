//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/converge"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/harness"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/interruption"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

const (
	// blockReservation is the Capacity Block the test's nodes are on.
	blockReservation = "cr-0e2eb10c000000001"
	// blockLabel is the label Karpenter's AWS provider gives a node of a reservation.
	blockLabel    = "karpenter.k8s.aws/capacity-reservation-id"
	blockReplicas = 20
)

// blockWarning is EC2's Capacity Block expiration warning for blockReservation.
func blockWarning(at, end time.Time) string {
	return fmt.Sprintf(`{"version":"0","id":"cb-end","detail-type":"Capacity Block Reservation Expiration Warning","source":"aws.ec2","account":%q,"time":%q,"region":%q,"resources":["arn:aws:ec2:%s:%s:capacity-reservation/%s"],"detail":{"capacity-reservation-id":%q,"end-date":%q}}`,
		signalsAccount, at.UTC().Format(time.RFC3339), signalsRegion, signalsRegion, signalsAccount, blockReservation, blockReservation, end.UTC().Format("2006-01-02T15:04:05.000Z"))
}

// patchNodes merge-patches each node with body. A node gone is left alone: once the
// block's pods moved, Karpenter may consolidate its empty node away.
func patchNodes(ctx context.Context, t *testing.T, names []string, body string) {
	t.Helper()
	for _, n := range names {
		_, err := env.client.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, []byte(body), metav1.PatchOptions{})
		switch {
		case apierrors.IsNotFound(err):
			t.Logf("node %s is gone (Karpenter consolidated it once empty)", n)
		case err != nil:
			t.Errorf("patching node %s with %s: %v", n, body, err)
		}
	}
}

// blockAhead is how far ahead of its warning the block ends in the test (the moves took
// 8 s; they must be done by the end and the cool-down after it), blockCooldown the
// loop's FALLBACK_COOLDOWN there.
const (
	blockAhead    = 40 * time.Second
	blockCooldown = 20 * time.Second
)

// A Capacity Block ends: one node of the spot4 term is labelled as the block's (the
// local cluster has no reservations; Karpenter's AWS provider labels a node with its
// reservation's id), and EC2's expiration warning arrives (the end blockAhead ahead, not
// 40 minutes, and a shorter cool-down, to keep the test short). The term is marked until
// a cool-down after the end, though one signalled node would never mark it on a
// rebalance recommendation; the pods of the block's node move within the budget to the fallback, and no pod goes back onto that node or the
// term before the end. At the end the test takes the block's node away (cordoned, as
// EC2 reclaims them); a cool-down later the seats return to the term on its other
// nodes and the workload is exact again.
func TestCapacityBlockEndMovesItsPodsAndNotBack(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(ctx, t, "e2e-capacity-block")
	waitServed(ctx, t, ns, signalsStrategy)
	d := deployment(ns, "block", signalsStrategy, blockReplicas, true)
	d.Spec.Template.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("1")
	createDeployment(ctx, t, d)
	assertExactSpread(ctx, t, signalsStrategy, settled(ctx, t, ns, "block", blockReplicas))
	rs := replicaSetOf(ctx, t, ns, d)
	before := livePods(ctx, t, ns, "block")

	// The block's node: the spot4 node with most of the workload's pods.
	podsOnNode := map[string]int{}
	for _, p := range before {
		if p.Spec.NodeSelector["nodesize"] == "spot4vcpu16gb" {
			podsOnNode[p.Spec.NodeName]++
		}
	}
	var pool []string
	for n := range podsOnNode {
		pool = append(pool, n)
	}
	sortByPods(pool, podsOnNode)
	if len(pool) < 2 {
		t.Fatalf("the workload's spot4 pods run on %d nodes; the test needs 2 or more", len(pool))
	}
	blockNodes := pool[:1]
	onBlock := podsOnNode[blockNodes[0]]
	inBlock := map[string]bool{blockNodes[0]: true}
	t.Cleanup(func() {
		patchNodes(context.Background(), t, blockNodes, `{"metadata":{"labels":{"`+blockLabel+`":null,"karpenter.k8s.aws/capacity-reservation-type":null}},"spec":{"unschedulable":false}}`)
	})
	patchNodes(ctx, t, blockNodes, `{"metadata":{"labels":{"`+blockLabel+`":"`+blockReservation+`","karpenter.k8s.aws/capacity-reservation-type":"capacity-block"}}}`)

	// The converger starts after the labels: its node view lists them (a message read
	// before that view synced comes back after the visibility timeout).
	conv, queue := startSignalsConverger(ctx, t, "FALLBACK_COOLDOWN="+blockCooldown.String())
	const p = "custom_kube_scheduler_webhook_"
	m := func(name string, labels harness.Labels) float64 { return metricSum(ctx, t, conv, name, labels) }
	signalled := time.Now()
	end := signalled.Add(blockAhead).Truncate(time.Second)
	if _, err := queue.Send("cksw-signals", blockWarning(signalled, end)); err != nil {
		t.Fatal(err)
	}
	watcher := watchBudget(ctx, ns, "block", blockReplicas)

	rec := waitAtRisk(ctx, t, rs.UID)
	marked := time.Since(signalled)
	st := rec.Terms[1]
	if want := end.Add(blockCooldown); st.Until.Sub(want).Abs() > time.Second {
		t.Errorf("marked until %s, want a cool-down after the block's end (%s)", st.Until, want)
	}
	if st.Risk.SignalledNodes != 1 || st.Risk.ByKind[string(interruption.KindCapacityBlockEnd)] != 1 || st.Risk.Nodes < 2 {
		t.Errorf("evidence %+v, want the block's one node of the term's nodes", *st.Risk)
	}
	for term := range rec.Terms {
		if term != 1 {
			t.Errorf("term %d marked too: %+v", term+1, rec.Terms[term])
		}
	}

	// The moves: every pod of the block's node, within the budget, onto the fallback.
	var state string
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		left := 0
		pods := livePods(ctx, t, ns, "block")
		for _, pod := range pods {
			if inBlock[pod.Spec.NodeName] {
				left++
			}
		}
		state = fmt.Sprintf("%d pods left on the block's nodes, %d pods", left, len(pods))
		return left == 0 && len(pods) == blockReplicas && allRunning(ctx, ns, "block"), nil
	}); err != nil {
		t.Fatalf("the pods of the block's nodes did not move: %s", state)
	}
	moved := time.Since(signalled)
	for uid, pod := range livePods(ctx, t, ns, "block") {
		if _, was := before[uid]; was {
			continue
		}
		if pod.Annotations[strategy.AnnotationFallbackFrom] != "2" || pod.Spec.NodeSelector["nodesize"] != "spot8vcpu32gb" {
			t.Errorf("new pod %s: nodeSelector %v, fallback-from %q; want the fallback term (spot8) from term 2", pod.Name, pod.Spec.NodeSelector, pod.Annotations[strategy.AnnotationFallbackFrom])
		}
	}
	evictions := m(p+"converge_evictions_total", harness.Labels{"reason": converge.MoveInterruption, "result": "evicted"})
	maxUnavailable, at := watcher.stop()
	budget, _ := converge.Budget(intstr.FromString("10%"), blockReplicas)
	t.Logf("MEASURED capacity block: %d of the term's %d nodes on the block, %d pods on them; warning -> mark %s, -> all moved %s; %v interruption evictions; most pods unavailable at once %d (budget %d)",
		len(blockNodes), st.Risk.Nodes, onBlock, marked.Round(time.Second), moved.Round(time.Second), evictions, maxUnavailable, budget)
	if int(evictions) != onBlock {
		t.Errorf("%v interruption evictions, want %d (the pods of the block's nodes)", evictions, onBlock)
	}
	if maxUnavailable > budget {
		t.Errorf("%d pods unavailable at once, the budget is %d: %s", maxUnavailable, budget, at)
	}

	// Not back: until the end nothing returns, and no pod lands on the block's nodes.
	if err := wait.PollUntilContextTimeout(ctx, time.Second, time.Until(end)+5*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, pod := range livePods(ctx, t, ns, "block") {
			if inBlock[pod.Spec.NodeName] {
				return false, fmt.Errorf("pod %s went back onto the block's node %s", pod.Name, pod.Spec.NodeName)
			}
		}
		return !time.Now().Before(end), nil
	}); err != nil {
		t.Fatalf("before the block's end: %v", err)
	}
	if got := m(p+"converge_evictions_total", harness.Labels{"reason": converge.MoveReturn}); got != 0 {
		t.Fatalf("%v return evictions before the block's end", got)
	}
	// The end: EC2 has the block's instances back.
	patchNodes(ctx, t, blockNodes, `{"spec":{"unschedulable":true}}`)

	watcher = watchBudget(ctx, ns, "block", blockReplicas)
	waitMetric(ctx, t, conv, p+"converge_evictions_total", harness.Labels{"reason": converge.MoveReturn, "result": "evicted"}, 1, blockCooldown+2*time.Minute)
	returned := time.Since(end)
	exactAfter := waitExact(ctx, t, ns, "block", signalsStrategy, blockReplicas, 6*time.Minute)
	maxUnavailable, at = watcher.stop()
	t.Logf("MEASURED capacity block return: end -> first return eviction %s (cool-down %s), -> exact %s after; most pods unavailable at once %d (budget %d)",
		returned.Round(time.Second), blockCooldown, exactAfter.Round(time.Second), maxUnavailable, budget)
	if returned < blockCooldown-time.Second {
		t.Errorf("the return started %s after the block's end, before the cool-down (%s)", returned, blockCooldown)
	}
	if maxUnavailable > budget {
		t.Errorf("%d pods unavailable at once during the return, the budget is %d: %s", maxUnavailable, budget, at)
	}
	pods := settled(ctx, t, ns, "block", blockReplicas)
	assertExactSpread(ctx, t, signalsStrategy, pods)
	for _, pod := range pods {
		if inBlock[pod.Spec.NodeName] {
			t.Errorf("pod %s runs on the ended block's node %s", pod.Name, pod.Spec.NodeName)
		}
	}
	if got := m(p+"interruption_messages_total", harness.Labels{"result": "signal"}); got != 1 {
		t.Errorf("interruption_messages_total{result=signal} = %v, want 1", got)
	}
	if queue.Messages("cksw-signals") != 0 {
		t.Errorf("%d messages left in the queue", queue.Messages("cksw-signals"))
	}
}
