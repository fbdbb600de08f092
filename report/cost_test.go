package report

import (
	"context"
	"math"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/pricing"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

func pricedNode(name, capacity, instanceType, zone, cpu, mem string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		"karpenter.sh/capacity-type": capacity, corev1.LabelInstanceTypeStable: instanceType, corev1.LabelTopologyZone: zone,
	}}}
	n.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
	return n
}

func withRequests(p corev1.Pod, cpu, mem string) corev1.Pod {
	p.Spec.Containers = []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}}}}
	return p
}

func TestAddCostSplitsNodesByRequests(t *testing.T) {
	prices, err := pricing.ParseTable(strings.NewReader(`
m5.xlarge on-demand * 0.192
m5.xlarge spot      z-a 0.0768
m5.xlarge spot      z-b 0.09
`))
	if err != nil {
		t.Fatal(err)
	}
	st := deploymentState(reportStrategy, 4, []corev1.Pod{
		withRequests(placedPod("p1", "rs", 1, "on-demand", corev1.PodRunning, "od1"), "1", "1Gi"),
		withRequests(placedPod("p2", "rs", 2, "spot", corev1.PodRunning, "spot-a"), "1", "2Gi"),
		withRequests(placedPod("p3", "rs", 3, "spot", corev1.PodRunning, "spot-b"), "500m", "8Gi"),
		withRequests(placedPod("p4", "rs", 4, "spot", corev1.PodRunning, "mystery"), "1", "1Gi"),
	}, map[string]*corev1.Node{
		"od1":     pricedNode("od1", "on-demand", "m5.xlarge", "z-a", "4", "16Gi"),
		"spot-a":  pricedNode("spot-a", "spot", "m5.xlarge", "z-a", "4", "16Gi"),
		"spot-b":  pricedNode("spot-b", "spot", "m5.xlarge", "z-b", "4", "16Gi"),
		"mystery": pricedNode("mystery", "spot", "x9.huge", "z-a", "4", "16Gi"),
	})
	r := Build(st, nil2all)
	AddCost(context.Background(), &r, prices)
	w := r.Workloads[0]
	od, spot := w.Terms[0].Cost, w.Terms[1].Cost
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-4 }
	// on-demand: a quarter of an m5.xlarge (1 of 4 CPUs > 1 of 16 Gi).
	if !near(od.USDPerHour, 0.192/4) || !near(od.SavingUSDPerHour, 0) {
		t.Fatalf("on-demand term cost %+v", od)
	}
	// spot: a quarter of spot-a (CPU) and half of spot-b (memory, 8 of 16 Gi).
	wantSpot, wantOD := 0.0768/4+0.09/2, 0.192/4+0.192/2
	if !near(spot.USDPerHour, wantSpot) || !near(spot.OnDemandUSDPerHour, wantOD) || !near(spot.SavingUSDPerHour, wantOD-wantSpot) {
		t.Fatalf("spot term cost %+v, want %.4f (on-demand %.4f)", spot, wantSpot, wantOD)
	}
	if od.PricedPods != 1 || spot.PricedPods != 2 || w.Cost.PricedPods != 3 {
		t.Fatalf("priced pods %d, %d, %d; want 1, 2, 3", od.PricedPods, spot.PricedPods, w.Cost.PricedPods)
	}
	if len(spot.Unpriced) != 1 || !strings.Contains(spot.Unpriced[0], "node mystery") || !strings.Contains(spot.Unpriced[0], "x9.huge") {
		t.Fatalf("unpriced %v, want the x9.huge node named", spot.Unpriced)
	}
	if !near(w.Cost.USDPerHour, od.USDPerHour+spot.USDPerHour) || w.Cost.SavingPercent <= 0 || len(w.Cost.Unpriced) != 1 {
		t.Fatalf("workload cost %+v", w.Cost)
	}
	wantPct := math.Round(1000*w.Cost.SavingUSDPerHour/w.Cost.OnDemandUSDPerHour) / 10
	if w.Cost.SavingPercent != wantPct {
		t.Fatalf("saving %v%%, want %v%%", w.Cost.SavingPercent, wantPct)
	}
}

func nil2all(string, string) bool { return true }

func TestShare(t *testing.T) {
	alloc := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi")}
	cases := []struct {
		req  corev1.ResourceList
		want float64
	}{
		{corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}, 0.25},
		{corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("12Gi")}, 0.75},
		{corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("9")}, 1},
		{nil, 0},
	}
	for _, c := range cases {
		if got := Share(c.req, alloc); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("Share(%v) = %v, want %v", c.req, got, c.want)
		}
	}
	if Share(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}, nil) != 0 {
		t.Error("a share of a node without allocatable")
	}
}

// A pod on reserved capacity is counted per term and priced at nothing (the reservation
// is paid anyway); its on-demand price still shows what it saves.
func TestReservedPodsAreCountedAndFree(t *testing.T) {
	prices, err := pricing.ParseTable(strings.NewReader("m5.xlarge on-demand * 0.192\nm5.xlarge spot * 0.08\n"))
	if err != nil {
		t.Fatal(err)
	}
	st := deploymentState("capacity=reserved|on-demand,base=2:capacity=spot", 3, []corev1.Pod{
		withRequests(placedPod("p1", "rs", 1, "reserved", corev1.PodRunning, "res1"), "1", "1Gi"),
		withRequests(placedPod("p2", "rs", 2, "on-demand", corev1.PodRunning, "od1"), "1", "1Gi"),
		withRequests(placedPod("p3", "rs", 3, "spot", corev1.PodRunning, "spot1"), "1", "1Gi"),
	}, map[string]*corev1.Node{
		"res1":  pricedNode("res1", "reserved", "m5.xlarge", "z-a", "4", "16Gi"),
		"od1":   pricedNode("od1", "on-demand", "m5.xlarge", "z-a", "4", "16Gi"),
		"spot1": pricedNode("spot1", "spot", "m5.xlarge", "z-a", "4", "16Gi"),
	})
	r := Build(st, nil2all)
	AddCost(context.Background(), &r, prices)
	w := r.Workloads[0]
	if !w.Exact || w.Terms[0].Placed != 2 || w.Terms[0].ReservedPods != 1 || w.Terms[1].ReservedPods != 0 {
		t.Fatalf("terms %+v (exact %v), want 2 pods on the set term, 1 of them reserved", w.Terms, w.Exact)
	}
	c := w.Terms[0].Cost
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-4 }
	if !near(c.USDPerHour, 0.192/4) || !near(c.OnDemandUSDPerHour, 2*0.192/4) || c.PricedPods != 2 || len(c.Unpriced) != 0 {
		t.Fatalf("set term cost %+v, want only the on-demand pod charged", c)
	}
}

// deploymentState is Deployment demo/web of strat and replicas, its ReplicaSet "rs",
// and pods and nodes.
func deploymentState(strat string, replicas int32, pods []corev1.Pod, nodes map[string]*corev1.Node) *State {
	dep := appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "demo", UID: "dep", Annotations: map[string]string{strategy.AnnotationStrategy: strat}},
		Spec:       appsv1.DeploymentSpec{Replicas: ptr.To(replicas)},
	}
	rs := appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "demo", UID: "rs",
		Annotations: map[string]string{"deployment.kubernetes.io/revision": "1"}, OwnerReferences: ownedBy("Deployment", "web", "dep")}}
	return &State{Deployments: []appsv1.Deployment{dep}, ReplicaSets: []appsv1.ReplicaSet{rs}, Pods: pods, Nodes: nodes}
}
