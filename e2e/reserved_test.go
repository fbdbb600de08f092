//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/report"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// reservedSetStrategy fills reservations first, then on-demand, for its base; spot after.
const reservedSetStrategy = "karpenter.sh/capacity-type=reserved|on-demand,base=3:karpenter.sh/capacity-type=spot"

// A set term on the real cluster: its pods get the required node affinity
// "karpenter.sh/capacity-type In [reserved, on-demand]" and no capacity-type
// nodeSelector, and Karpenter serves them, from the local cluster's reservation or
// on-demand: the split stays exact, counted from the capacity-type labels of the
// nodes the pods run on.
func TestReservedOrOnDemandSetTerm(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(ctx, t, "e2e-reserved-set")
	d := deployment(ns, "reserved-set", reservedSetStrategy, 8, true)
	createDeployment(ctx, t, d)
	pods := settled(ctx, t, ns, d.Name, 8)

	allNodes := nodes(ctx, t)
	byCapacity := map[string]int{}
	want := []string{"reserved", "on-demand"}
	for _, p := range pods {
		if p.Status.Phase != corev1.PodRunning {
			t.Errorf("pod %s: phase %s, want Running", p.Name, p.Status.Phase)
			continue
		}
		node := allNodes[p.Spec.NodeName]
		capacity := node.Labels[strategy.CapacityTypeLabel]
		byCapacity[capacity]++
		if p.Annotations[strategy.AnnotationTerm] != "1" {
			continue
		}
		if v, ok := p.Spec.NodeSelector[strategy.CapacityTypeLabel]; ok {
			t.Errorf("pod %s of the set term has nodeSelector %s=%s; want the set as node affinity", p.Name, strategy.CapacityTypeLabel, v)
		}
		if !requiresIn(p, strategy.CapacityTypeLabel, want) {
			t.Errorf("pod %s of the set term: required node affinity %+v lacks %s In %v", p.Name, p.Spec.Affinity, strategy.CapacityTypeLabel, want)
		}
		if !slices.Contains(want, capacity) {
			t.Errorf("pod %s of the set term runs on node %s with capacity type %q", p.Name, node.Name, capacity)
		}
	}
	// The target for 8 pods is 3 on the set term, 5 on spot.
	if got := byCapacity["reserved"] + byCapacity["on-demand"]; got != 3 || byCapacity["spot"] != 5 {
		t.Errorf("pods by node capacity type %v, want 3 reserved or on-demand and 5 spot", byCapacity)
	}
}

// requiresIn reports whether every required node affinity term of p carries key In values.
func requiresIn(p corev1.Pod, key string, values []string) bool {
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return false
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	for _, term := range terms {
		if !slices.ContainsFunc(term.MatchExpressions, func(r corev1.NodeSelectorRequirement) bool {
			return r.Key == key && r.Operator == corev1.NodeSelectorOpIn && slices.Equal(r.Values, values)
		}) {
			return false
		}
	}
	return len(terms) > 0
}

// The local cluster's capacity reservation (scripts/localcluster/lib.sh): 2 nodes of
// s-4x-amd64-linux (4 vCPU), launched by the NodePool "reserved" only.
const (
	reservationNodes  = 2
	reservationID     = "cr-kwok-e2e"
	reservationIDKey  = "karpenter.k8s.aws/capacity-reservation-id"
	reservedNodePool  = "reserved"
	reservedFillCount = 6
)

// reservedFillStrategy has 4 seats that accept reserved or on-demand capacity, two more
// than the reservation holds; the rest is spot.
const reservedFillStrategy = "karpenter.sh/capacity-type=reserved|on-demand,base=4:karpenter.sh/capacity-type=spot"

// A base that accepts reserved|on-demand fills the reservation first, then on-demand:
// of its 4 pods (3 vCPUs each, so a 4-vCPU node of the reservation holds one) exactly 2
// run on the reservation's nodes and 2 on on-demand, the spread exact; spread shows
// the 2 reserved pods, priced at nothing, against their on-demand price. The reservation
// fills as Karpenter launches: a pod that fits on an on-demand node already there runs
// on it (kube-scheduler's choice; CI's full run put 3 of the 4 on room earlier tests
// left), so the nodes earlier tests left are cordoned for the test.
func TestReservedFillsReservationThenOnDemand(t *testing.T) {
	ctx := context.Background()
	freeReservation(ctx, t)
	cordonUntilCleanup(ctx, t, "karpenter.sh/capacity-type")
	ns := newNamespace(ctx, t, "e2e-reserved-fill")
	d := deployment(ns, "fill", reservedFillStrategy, reservedFillCount, true)
	d.Spec.Template.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}
	createDeployment(ctx, t, d)
	pods := settled(ctx, t, ns, d.Name, reservedFillCount)
	counts := assertExactSpread(ctx, t, reservedFillStrategy, pods)
	t.Logf("MEASURED per-term pods %v", counts)

	allNodes := nodes(ctx, t)
	byCapacity := map[string]int{}
	for _, p := range pods {
		if p.Annotations[strategy.AnnotationTerm] != "1" {
			continue
		}
		n := allNodes[p.Spec.NodeName]
		byCapacity[n.Labels[strategy.CapacityTypeLabel]]++
		if n.Labels[strategy.CapacityTypeLabel] == "reserved" && (n.Labels[reservationIDKey] != reservationID || n.Labels[labelNodePool] != reservedNodePool) {
			t.Errorf("pod %s on reserved node %s: reservation %q, NodePool %q; want %s from NodePool %s", p.Name, n.Name, n.Labels[reservationIDKey], n.Labels[labelNodePool], reservationID, reservedNodePool)
		}
	}
	t.Logf("MEASURED base pods by node capacity type: %v", byCapacity)
	if byCapacity["reserved"] != reservationNodes || byCapacity["on-demand"] != 4-reservationNodes {
		t.Errorf("base pods by node capacity type %v, want %d reserved (the reservation) and %d on-demand", byCapacity, reservationNodes, 4-reservationNodes)
	}

	// spread: the reserved pods per term, priced at nothing against their on-demand price
	// (the local cluster's price file: the kwok provider's own prices).
	const prices = "../scripts/localcluster/prices.txt"
	onDemand := onDemandPrices(t, prices)
	out, stderr, code := cli(ctx, t, nil, "spread", "-n", ns, "deployment/fill", "--cost", "--prices", prices, "-o", "json")
	var r report.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != 0 || len(r.Workloads) != 1 {
		t.Fatalf("spread --cost -o json: exit %d, %v\n%s%s", code, err, out, stderr)
	}
	w := r.Workloads[0]
	if w.Terms[0].ReservedPods != reservationNodes || w.Terms[1].ReservedPods != 0 {
		t.Errorf("spread reservedPods %d and %d, want %d on the set term, 0 on spot", w.Terms[0].ReservedPods, w.Terms[1].ReservedPods, reservationNodes)
	}
	var paid, asOnDemand float64
	for _, n := range w.Terms[0].Nodes {
		price, ok := onDemand[n.InstanceType]
		if !ok {
			t.Fatalf("node %s: instance type %q has no on-demand price in %s", n.Name, n.InstanceType, prices)
		}
		asOnDemand += price * n.Share
		if n.CapacityType != "reserved" {
			paid += price * n.Share
		}
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 2e-4 }
	if c := w.Terms[0].Cost; c == nil || !near(c.USDPerHour, paid) || !near(c.OnDemandUSDPerHour, asOnDemand) || len(c.Unpriced) != 0 {
		t.Errorf("set term cost %+v, want $%.4f/h (its on-demand nodes; reserved at nothing) against $%.4f/h all on-demand", c, paid, asOnDemand)
	}
	table, _, code := cli(ctx, t, nil, "spread", "-n", ns, "deployment/fill", "--cost", "--prices", prices)
	if code != 0 || !strings.Contains(table, strconv.Itoa(reservationNodes)+" of its pods on reserved capacity") {
		t.Errorf("spread --cost table (exit %d) does not show the reserved pods:\n%s", code, table)
	}
	t.Logf("spread --cost:\n%s", table)
}

// freeReservation deletes the NodeClaims of the reservation's NodePool left by earlier
// tests (their nodes go with them), so the reservation holds reservationNodes again.
// Only pods of a term that accepts "reserved" tolerate that pool.
func freeReservation(ctx context.Context, t *testing.T) {
	t.Helper()
	if _, stderr, err := kubectl(ctx, "", "delete", "nodeclaims", "-l", labelNodePool+"="+reservedNodePool, "--wait=true", "--timeout=5m"); err != nil {
		t.Fatalf("deleting the NodeClaims of NodePool %s: %v\n%s", reservedNodePool, err, stderr)
	}
}

// onDemandPrices reads the on-demand price of each instance type from a price file
// (instance-type capacity-type zone|region|* usd-per-hour).
func onDemandPrices(t *testing.T, path string) map[string]float64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 4 || strings.HasPrefix(fields[0], "#") || fields[1] != "on-demand" {
			continue
		}
		price, err := strconv.ParseFloat(fields[3], 64)
		if err != nil {
			t.Fatalf("%s: %q: %v", path, sc.Text(), err)
		}
		out[fields[0]] = price
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// A term that accepts reserved capacity only, with more seats than the reservation
// holds: the reservation's nodes take what they hold, and the pod left waiting is the
// convergence loop's, whose fallback puts it on the other term (TermUnavailable).
func TestReservedOnlyTermFallsBackWhenTheReservationIsFull(t *testing.T) {
	ctx := context.Background()
	freeReservation(ctx, t)
	ns := newNamespace(ctx, t, "e2e-reserved-only")
	startConverger(ctx, t, "converge-reserved", 70)
	// 1 on-demand seat, 3 reserved seats of 3 vCPUs: one more than the reservation holds.
	const strat = "karpenter.sh/capacity-type=on-demand,base=1:karpenter.sh/capacity-type=reserved,weight=1"
	const replicas = 4
	waitServed(ctx, t, ns, strat)
	d := deployment(ns, "reserved-only", strat, replicas, true)
	d.Spec.Template.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}
	created := time.Now()
	createDeployment(ctx, t, d)
	waitAllRunning(ctx, t, ns, "reserved-only", replicas, fallbackAfter+2*time.Minute)
	t.Logf("MEASURED reservation full -> all %d pods Running %s after the Deployment was created", replicas, time.Since(created).Round(time.Second))
	pods := settled(ctx, t, ns, "reserved-only", replicas)
	allNodes := nodes(ctx, t)
	onReserved, fallback := 0, 0
	for _, p := range pods {
		capacity := allNodes[p.Spec.NodeName].Labels[strategy.CapacityTypeLabel]
		switch {
		case p.Annotations[strategy.AnnotationFallbackFrom] == "2":
			fallback++
			if capacity != "on-demand" || p.Annotations[strategy.AnnotationTerm] != "1" {
				t.Errorf("fallback pod %s: on a %q node, term %s; want on-demand, term 1", p.Name, capacity, p.Annotations[strategy.AnnotationTerm])
			}
		case p.Spec.NodeSelector[strategy.CapacityTypeLabel] == "reserved":
			onReserved++
			if capacity != "reserved" {
				t.Errorf("pod %s of the reserved term runs on a %q node", p.Name, capacity)
			}
		}
	}
	msgs := eventsWith(ctx, t, ns, "reserved-only", "TermUnavailable")
	t.Logf("MEASURED reserved-only term: %d pods on the reservation, %d on the fallback; TermUnavailable: %q", onReserved, fallback, msgs)
	if onReserved != reservationNodes || fallback != 3-reservationNodes {
		t.Errorf("%d pods on the reservation and %d on the fallback, want %d and %d", onReserved, fallback, reservationNodes, 3-reservationNodes)
	}
	if len(msgs) == 0 {
		t.Errorf("no TermUnavailable Event on the Deployment")
	}
}

// Reserved capacity standing idle beside a workload's on-demand pods: a set term's one
// pod (1 CPU) launches a node of the reservation and leaves most of it free, while a
// second workload whose term is plain on-demand runs its 2 pods on on-demand. spread
// shows, on that term, the room for more of its pods on the reservation (as the
// scheduler counts it: the node's allocatable less what its pods request) and that the
// term does not accept reserved; on the set term, which has no on-demand pod, nothing.
func TestReservedIdleBesideOnDemandPods(t *testing.T) {
	ctx := context.Background()
	freeReservation(ctx, t)
	cordonUntilCleanup(ctx, t, "karpenter.sh/capacity-type")
	ns := newNamespace(ctx, t, "e2e-reserved-idle")
	oneCPU := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
	set := deployment(ns, "set", "karpenter.sh/capacity-type=reserved|on-demand", 1, true)
	set.Spec.Template.Spec.Containers[0].Resources.Requests = oneCPU
	createDeployment(ctx, t, set)
	setPod := settled(ctx, t, ns, set.Name, 1)[0]
	reservedNode := nodes(ctx, t)[setPod.Spec.NodeName] // listed once the pod runs
	if reservedNode.Labels[strategy.CapacityTypeLabel] != "reserved" || reservedNode.Labels[reservationIDKey] != reservationID {
		t.Fatalf("the set term's pod runs on node %s of capacity type %q, reservation %q; want a node of %s", reservedNode.Name,
			reservedNode.Labels[strategy.CapacityTypeLabel], reservedNode.Labels[reservationIDKey], reservationID)
	}
	od := deployment(ns, "od", "karpenter.sh/capacity-type=on-demand", 2, true)
	od.Spec.Template.Spec.Containers[0].Resources.Requests = oneCPU
	createDeployment(ctx, t, od)
	settled(ctx, t, ns, od.Name, 2)

	// What the reservation's nodes have left, in pods of 1 CPU.
	want := 0
	for _, n := range nodes(ctx, t) {
		if n.Labels[strategy.CapacityTypeLabel] != "reserved" || n.Spec.Unschedulable {
			continue
		}
		pods, err := env.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.Name})
		if err != nil {
			t.Fatal(err)
		}
		free := n.Status.Allocatable.Cpu().MilliValue()
		for _, p := range pods.Items {
			for _, c := range p.Spec.Containers {
				free -= c.Resources.Requests.Cpu().MilliValue()
			}
		}
		want += int(max(free, 0) / 1000)
	}
	t.Logf("MEASURED reserved room: %d pods of 1 CPU (node %s allocatable %s)", want, reservedNode.Name, reservedNode.Status.Allocatable.Cpu())
	if want == 0 {
		t.Fatalf("the reservation's node %s has no room left for a pod of 1 CPU", reservedNode.Name)
	}

	out, stderr, code := cli(ctx, t, nil, "spread", "-n", ns, "-o", "json")
	var r report.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != 0 || len(r.Workloads) != 2 {
		t.Fatalf("spread -o json: exit %d, %v\n%s%s", code, err, out, stderr)
	}
	for _, w := range r.Workloads {
		idle := w.Terms[0].IdleReserved
		switch w.Name {
		case "set":
			if idle != nil {
				t.Errorf("set term (no pod on on-demand): idle reserved %+v, want none", idle)
			}
		case "od":
			if idle == nil || idle.Pods != want || idle.OnDemandPods != 2 || !slices.Equal(idle.Reservations, []string{reservationID}) || idle.AcceptsReserved {
				t.Errorf("on-demand term: idle reserved %+v, want room for %d beside 2 on-demand pods in %s, not accepted", idle, want, reservationID)
			}
		}
	}
	table, _, code := cli(ctx, t, nil, "spread", "-n", ns, "deployment/od")
	line := "reserved room idle for " + strconv.Itoa(want) + " more of its pods (" + reservationID + "), 2 on on-demand: the term does not accept reserved"
	if code != 0 || !strings.Contains(table, line) {
		t.Errorf("spread (exit %d) does not say %q:\n%s", code, line, table)
	}
	t.Logf("spread:\n%s", table)
}
