package karpenter

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
)

func limitedPool(limits, used corev1.ResourceList) *karpv1.NodePool {
	np := &karpv1.NodePool{}
	np.Name = "spot"
	np.Spec.Limits = karpv1.Limits(limits)
	np.Status.Resources = used
	return np
}

func rl(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

func TestNodePoolHeadroom(t *testing.T) {
	req := rl("cpu", "500m", "memory", "1Gi")
	cases := []struct {
		name string
		np   *karpv1.NodePool
		req  corev1.ResourceList
		want Headroom
	}{
		{"no limits", limitedPool(nil, rl("cpu", "100")), req, Headroom{Unlimited: true}},
		{"cpu bounds", limitedPool(rl("cpu", "20", "memory", "100Gi"), rl("cpu", "17500m", "memory", "10Gi")), req,
			Headroom{Pods: 5, Bound: "cpu", Left: "2500m"}},
		{"memory bounds", limitedPool(rl("cpu", "100", "memory", "20Gi"), rl("cpu", "4", "memory", "16Gi")), req,
			Headroom{Pods: 4, Bound: "memory", Left: "4Gi"}},
		{"used beyond the limit", limitedPool(rl("cpu", "8"), rl("cpu", "12")), req, Headroom{Pods: 0, Bound: "cpu", Left: "0"}},
		{"limit on what the pod does not request", limitedPool(rl("nvidia.com/gpu", "4"), nil), req, Headroom{Unlimited: true}},
		{"pods limit", limitedPool(rl("pods", "110", "cpu", "1000"), rl("pods", "107")), req, Headroom{Pods: 3, Bound: "pods", Left: "3"}},
		{"nodes left", limitedPool(rl("nodes", "10"), rl("nodes", "4")), req, Headroom{Unlimited: true}},
		{"nodes used up", limitedPool(rl("nodes", "4"), rl("nodes", "4")), req, Headroom{Pods: 0, Bound: "nodes", Left: "0"}},
		{"no requests", limitedPool(rl("cpu", "20"), rl("cpu", "19")), nil, Headroom{Unlimited: true}},
	}
	for _, c := range cases {
		if got := NodePoolHeadroom(c.np, c.req); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: NodePoolHeadroom = %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestOfferingsNarrowedByTerm(t *testing.T) {
	np := &karpv1.NodePool{}
	np.Name = "mixed"
	np.Spec.Template.Spec.Requirements = []karpv1.NodeSelectorRequirementWithMinValues{
		{Key: karpv1.CapacityTypeLabelKey, Operator: corev1.NodeSelectorOpIn, Values: []string{"spot", "on-demand"}},
		{Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"m5.large", "c5.large", "m6i.large"}},
	}
	types, capacity, err := Offerings(np, map[string]string{karpv1.CapacityTypeLabelKey: "spot"})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(types, []string{"c5.large", "m5.large", "m6i.large"}) || !reflect.DeepEqual(capacity, []string{"spot"}) {
		t.Fatalf("Offerings = %v, %v", types, capacity)
	}
	types, _, err = Offerings(np, map[string]string{corev1.LabelInstanceTypeStable: "m5.large"})
	if err != nil || !reflect.DeepEqual(types, []string{"m5.large"}) {
		t.Fatalf("pinned type: %v, %v", types, err)
	}
	np.Spec.Template.Spec.Requirements = np.Spec.Template.Spec.Requirements[:1]
	if types, _, _ := Offerings(np, nil); types != nil {
		t.Fatalf("unconstrained pool gave instance types %v", types)
	}
}
