package plan

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/karpenter/nodegroups"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/unavailability"
)

const odThenSpot = "karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3"

func capacityPool(name, capacityType string, limits, used corev1.ResourceList, taints ...corev1.Taint) *karpv1.NodePool {
	np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: name}}
	np.Spec.Template.Spec.Requirements = []karpv1.NodeSelectorRequirementWithMinValues{
		{Key: karpv1.CapacityTypeLabelKey, Operator: corev1.NodeSelectorOpIn, Values: []string{capacityType}},
	}
	np.Spec.Template.Spec.Taints = taints
	np.Spec.Limits = karpv1.Limits(limits)
	np.Status.Resources = used
	return np
}

func cpu(v string) corev1.ResourceList {
	return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(v)}
}

func mustParse(t *testing.T, raw string) *strategy.Strategy {
	t.Helper()
	s, err := strategy.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// firstShort walks the targets the slow way: the first n whose target exceeds room.
func firstShort(s *strategy.Strategy, term, room, placed, maxN int) int {
	for n := 1; n <= maxN; n++ {
		if s.Target(n)[term]-placed > room {
			return n
		}
	}
	return 0
}

func TestComputeFindsTheFirstShortReplicaCount(t *testing.T) {
	s := mustParse(t, odThenSpot)
	spotTaint := corev1.Taint{Key: "spot", Value: "true", Effect: corev1.TaintEffectNoSchedule}
	c := Capacity{NodePools: []*karpv1.NodePool{
		capacityPool("od", "on-demand", nil, nil),
		// 20 CPUs, 17.5 used: 2.5 left, 5 pods of 500m.
		capacityPool("spot", "spot", cpu("20"), cpu("17500m"), spotTaint),
	}}
	in := Input{Strategy: s, Replicas: 10, MaxReplicas: 40, Requests: cpu("500m")}
	r := Compute(in, c)
	if r.Fits {
		t.Fatal("a plan with 5 spot pods of room for 40 replicas fits")
	}
	od, spot := r.Terms[0], r.Terms[1]
	if !od.Fits || !od.Unlimited || len(od.NodePools) != 1 || od.NodePools[0].Name != "od" {
		t.Fatalf("on-demand term %+v, want it served by od without limit", od)
	}
	want := firstShort(s, 1, 5, 0, 40)
	if want == 0 || spot.ShortAt != want || spot.Room != 5 || spot.Fits {
		t.Fatalf("spot term: shortAt %d room %d fits %v; want short at %d with room 5", spot.ShortAt, spot.Room, spot.Fits, want)
	}
	if s.Target(spot.ShortAt)[1] != 6 || s.Target(spot.ShortAt - 1)[1] != 5 {
		t.Fatalf("short at %d, but the spot targets there are %v and %v", spot.ShortAt, s.Target(spot.ShortAt-1), s.Target(spot.ShortAt))
	}
	for _, want := range []string{"NodePool spot has room for 5 more pods", "cpu 2500m left"} {
		if !strings.Contains(spot.Short, want) {
			t.Errorf("reason %q lacks %q", spot.Short, want)
		}
	}
	if len(spot.Tolerations) != 1 || spot.Tolerations[0].Key != "spot" || spot.Tolerations[0].Value != "true" {
		t.Fatalf("spot tolerations %+v, want one for the pool's taint", spot.Tolerations)
	}
	if spot.Target != s.Target(10)[1] || spot.TargetMax != s.Target(40)[1] {
		t.Fatalf("targets %d/%d", spot.Target, spot.TargetMax)
	}

	// Pods the workload already runs on spot count as placed: room for 5 more after them.
	in.Placed = []int{2, 7}
	r = Compute(in, c)
	if got, want := r.Terms[1].ShortAt, firstShort(s, 1, 5, 7, 40); got != want || !strings.Contains(r.Terms[1].Short, "beyond its 7 placed") {
		t.Fatalf("with 7 placed: short at %d (%q), want %d", got, r.Terms[1].Short, want)
	}

	// A higher limit fits the range.
	c.NodePools[1] = capacityPool("spot", "spot", cpu("100"), cpu("17500m"))
	if r := Compute(in, c); !r.Fits || r.Terms[1].Room != 165 {
		t.Fatalf("raised limit: fits %v room %d", r.Fits, r.Terms[1].Room)
	}
}

func TestComputeNodeGroupsAndUnservedTerms(t *testing.T) {
	s := mustParse(t, "eks.amazonaws.com/capacityType=ON_DEMAND,base=1:eks.amazonaws.com/capacityType=SPOT:nodesize=typo")
	group := func(name, capacityType string, free int) nodegroups.Group {
		return nodegroups.Group{Name: name, Status: "ACTIVE", CapacityType: capacityType,
			Labels: map[string]string{nodegroups.LabelNodeGroup: name, nodegroups.LabelCapacityType: capacityType},
			Size:   nodegroups.Size{Known: true, Max: 10, Desired: 10 - free}}
	}
	node := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{nodegroups.LabelNodeGroup: "spot"}}}
	node.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3920m"), corev1.ResourcePods: resource.MustParse("58")}
	c := Capacity{
		NodeGroups:  []nodegroups.Group{group("od", "ON_DEMAND", 2), group("spot", "SPOT", 3)},
		Nodes:       []corev1.Node{node},
		Unavailable: map[int]unavailability.TermState{1: {Until: time.Date(2026, 11, 26, 1, 0, 0, 0, time.UTC), Reason: "NodeClaim failed"}},
	}
	r := Compute(Input{Strategy: s, Replicas: 30, MaxReplicas: 30, Requests: cpu("1")}, c)
	od, spot, typo := r.Terms[0], r.Terms[1], r.Terms[2]
	if !od.RoomUnknown || od.NodeGroups[0].FreeNodes != 2 || od.NodeGroups[0].PodsPerNode != 0 || !od.Fits {
		t.Fatalf("od term %+v: want 2 free nodes of unknown size, not judged short", od)
	}
	if g := spot.NodeGroups[0]; g.PodsPerNode != 3 || g.Pods != 9 || spot.Room != 9 {
		t.Fatalf("spot group %+v room %d, want 3 pods per node, 9 pods", g, spot.Room)
	}
	if spot.UnavailableUntil != "2026-11-26T01:00:00Z" || spot.UnavailableReason != "NodeClaim failed" {
		t.Fatalf("spot unavailable %q %q", spot.UnavailableUntil, spot.UnavailableReason)
	}
	if typo.ShortAt == 0 || typo.ShortAt != firstShort(s, 2, 0, 0, 30) || !strings.Contains(typo.Short, "no NodePool or node group serves") {
		t.Fatalf("unserved term: short at %d (%q)", typo.ShortAt, typo.Short)
	}
	if r.Fits {
		t.Fatal("plan fits with an unserved term")
	}
}

func TestPodsFit(t *testing.T) {
	alloc := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi"), corev1.ResourcePods: resource.MustParse("110")}
	cases := []struct {
		req  corev1.ResourceList
		want int
	}{
		{corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("4Gi")}, 4},
		{cpu("100m"), 40},
		{cpu("10m"), 110},
		{nil, 110},
	}
	for _, c := range cases {
		if got := PodsFit(alloc, c.req); got != c.want {
			t.Errorf("PodsFit(%v) = %d, want %d", c.req, got, c.want)
		}
	}
}
