package plan

import (
	"context"
	"math"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/pricing"
)

func TestProjectCheapestAndMedian(t *testing.T) {
	prices, err := pricing.ParseTable(strings.NewReader(`
a.large on-demand * 0.10
b.large on-demand * 0.20
c.large on-demand * 0.40
a.large spot * 0.03
b.large spot * 0.05
c.large spot * 0.30
`))
	if err != nil {
		t.Fatal(err)
	}
	spot := capacityPool("spot", "spot", nil, nil)
	spot.Spec.Template.Spec.Requirements = append(spot.Spec.Template.Spec.Requirements, karpv1.NodeSelectorRequirementWithMinValues{
		Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"a.large", "b.large", "c.large", "d.large"}})
	od := capacityPool("od", "on-demand", nil, nil) // instance types unconstrained
	node := func(it string) corev1.Node {
		n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: it, Labels: map[string]string{corev1.LabelInstanceTypeStable: it}}}
		n.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("8Gi")}
		return n
	}
	c := Capacity{NodePools: []*karpv1.NodePool{od, spot}, Nodes: []corev1.Node{node("a.large"), node("b.large"), node("c.large")}}
	in := Input{Strategy: mustParse(t, odThenSpot), Replicas: 10, MaxReplicas: 10, Requests: cpu("500m")}
	r := Compute(in, c)
	Project(context.Background(), in, c, &r, prices)
	p := r.Terms[1].Cost
	pods := float64(r.Terms[1].TargetMax)
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-3 }
	// A pod takes a quarter of a 2-CPU node.
	if !near(p.CheapestUSDPerHour, 0.03/4*pods) || p.CheapestOffering != "a.large spot" || !near(p.MedianUSDPerHour, 0.05/4*pods) || p.Offerings != 3 {
		t.Fatalf("spot projection %+v for %v pods", p, pods)
	}
	if !near(p.OnDemandMedianUSDPerHour, 0.20/4*pods) {
		t.Fatalf("on-demand median %v", p.OnDemandMedianUSDPerHour)
	}
	if len(p.Unpriced) != 1 || !strings.Contains(p.Unpriced[0], "d.large: no node of this type") {
		t.Fatalf("unpriced %v", p.Unpriced)
	}
	if u := r.Terms[0].Cost.Unpriced; len(u) != 1 || !strings.Contains(u[0], "NodePool od: its instance types are not constrained") {
		t.Fatalf("on-demand term unpriced %v", u)
	}
	if !near(r.Cost.SavingUSDPerHour, r.Cost.OnDemandMedianUSDPerHour-r.Cost.MedianUSDPerHour) || r.Cost.SavingPercent <= 0 {
		t.Fatalf("totals %+v", r.Cost)
	}
}
