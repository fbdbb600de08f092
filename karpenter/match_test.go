package karpenter

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/karpenter/nodegroups"
)

const (
	capType  = karpv1.CapacityTypeLabelKey
	awsCPU   = "karpenter.k8s.aws/instance-cpu"
	kwokCPU  = "karpenter.kwok.sh/instance-cpu"
	zone     = corev1.LabelTopologyZone
	arch     = corev1.LabelArchStable
	instType = corev1.LabelInstanceTypeStable
)

// req builds a NodePool requirement.
func req(key string, op corev1.NodeSelectorOperator, values ...string) karpv1.NodeSelectorRequirementWithMinValues {
	return karpv1.NodeSelectorRequirementWithMinValues{Key: key, Operator: op, Values: values}
}

// pool builds a NodePool the way it comes back from the API server.
func pool(name string, labels map[string]string, reqs ...karpv1.NodeSelectorRequirementWithMinValues) *karpv1.NodePool {
	return &karpv1.NodePool{
		TypeMeta:   metav1.TypeMeta{APIVersion: "karpenter.sh/v1", Kind: "NodePool"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: karpv1.NodePoolSpec{Template: karpv1.NodeClaimTemplate{
			ObjectMeta: karpv1.ObjectMeta{Labels: labels},
			Spec: karpv1.NodeClaimTemplateSpec{
				Requirements: reqs,
				NodeClassRef: &karpv1.NodeClassReference{Group: "karpenter.k8s.aws", Kind: "EC2NodeClass", Name: "default"},
			},
		}},
	}
}

func term(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

func TestMatcherNodePool(t *testing.T) {
	m := NewMatcher()
	spot := pool("spot", nil, req(capType, corev1.NodeSelectorOpIn, "spot"))
	notSpot := pool("not-spot", nil, req(capType, corev1.NodeSelectorOpNotIn, "spot"))
	odOrSpot := pool("both", nil, req(capType, corev1.NodeSelectorOpIn, "on-demand", "spot"))
	teamExists := pool("team", nil, req("team", corev1.NodeSelectorOpExists))
	noGPU := pool("no-gpu", nil, req("gpu", corev1.NodeSelectorOpDoesNotExist))
	gt := pool("gt", nil, req(awsCPU, corev1.NodeSelectorOpGt, "3"))
	lt := pool("lt", nil, req(awsCPU, corev1.NodeSelectorOpLt, "8"))
	gte := pool("gte", nil, req(awsCPU, karpv1.NodeSelectorOpGte, "4"))
	lte := pool("lte", nil, req(awsCPU, karpv1.NodeSelectorOpLte, "16"))
	band := pool("band", nil, req(awsCPU, karpv1.NodeSelectorOpGte, "4"), req(awsCPU, karpv1.NodeSelectorOpLte, "8"))
	sized := pool("sized", map[string]string{"nodesize": "spot4vcpu16gb"}, req(capType, corev1.NodeSelectorOpIn, "spot"))
	plain := pool("plain", nil)
	armOnly := pool("arm", nil, req(arch, corev1.NodeSelectorOpIn, "arm64"))
	kwokGte := pool("kwok", nil, req(kwokCPU, karpv1.NodeSelectorOpGte, "4"))

	cases := []struct {
		name  string
		np    *karpv1.NodePool
		term  map[string]string
		serve bool
	}{
		{"In matches", spot, term(capType, "spot"), true},
		{"In excludes", spot, term(capType, "on-demand"), false},
		{"In with several values", odOrSpot, term(capType, "on-demand"), true},
		{"NotIn excludes", notSpot, term(capType, "spot"), false},
		{"NotIn allows the rest", notSpot, term(capType, "on-demand"), true},
		{"Exists on a custom label", teamExists, term("team", "payments"), true},
		{"DoesNotExist refuses the label", noGPU, term("gpu", "true"), false},
		{"Gt above", gt, term(awsCPU, "4"), true},
		{"Gt equal", gt, term(awsCPU, "3"), false},
		{"Gt non-integer", gt, term(awsCPU, "four"), false},
		{"Lt below", lt, term(awsCPU, "7"), true},
		{"Lt equal", lt, term(awsCPU, "8"), false},
		{"Gte equal", gte, term(awsCPU, "4"), true},
		{"Gte below", gte, term(awsCPU, "3"), false},
		{"Lte equal", lte, term(awsCPU, "16"), true},
		{"Lte above", lte, term(awsCPU, "17"), false},
		{"Gte+Lte low edge", band, term(awsCPU, "4"), true},
		{"Gte+Lte high edge", band, term(awsCPU, "8"), true},
		{"Gte+Lte outside", band, term(awsCPU, "9"), false},
		{"template label matches", sized, term("nodesize", "spot4vcpu16gb"), true},
		{"template label other value", sized, term("nodesize", "spot8vcpu32gb"), false},
		{"template label and requirement together", sized, term("nodesize", "spot4vcpu16gb", capType, "spot"), true},
		{"template label with conflicting capacity type", sized, term("nodesize", "spot4vcpu16gb", capType, "on-demand"), false},
		{"custom label undefined", plain, term("nodesize", "spot4vcpu16gb"), false},
		{"well-known capacity type undefined", plain, term(capType, "spot"), true},
		{"well-known zone undefined", plain, term(zone, "eu-west-1a"), true},
		{"well-known instance type undefined", plain, term(instType, "m5.large"), true},
		{"AWS well-known label undefined", plain, term("karpenter.k8s.aws/instance-family", "m7g"), true},
		{"AWS instance-cpu undefined", plain, term(awsCPU, "4"), true},
		{"kwok label is not well known by default", plain, term(kwokCPU, "4"), false},
		{"kwok label constrained by the pool", kwokGte, term(kwokCPU, "8"), true},
		{"nodepool name matches", spot, term(karpv1.NodePoolLabelKey, "spot"), true},
		{"nodepool name of another pool", spot, term(karpv1.NodePoolLabelKey, "plain"), false},
		{"node class label", plain, term("karpenter.k8s.aws/ec2nodeclass", "default"), true},
		{"node class label other class", plain, term("karpenter.k8s.aws/ec2nodeclass", "gpu"), false},
		{"arch requirement", armOnly, term(arch, "arm64"), true},
		{"arch requirement other value", armOnly, term(arch, "amd64"), false},
		{"deprecated arch key is normalised", armOnly, term("beta.kubernetes.io/arch", "amd64"), false},
		{"deprecated arch key matches", armOnly, term("beta.kubernetes.io/arch", "arm64"), true},
		{"one label of two unknown", spot, term(capType, "spot", "team", "x"), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := m.NodePool(tc.np, tc.term)
			if (err == nil) != tc.serve {
				t.Fatalf("NodePool(%s, %v) = %v, want serve=%v", tc.np.Name, tc.term, err, tc.serve)
			}
		})
	}
}

func TestMatcherNodePoolExtraWellKnown(t *testing.T) {
	m := NewMatcher(kwokWellKnownLabels()...)
	if err := m.NodePool(pool("plain", nil), term(kwokCPU, "4")); err != nil {
		t.Fatalf("extra well-known label refused: %v", err)
	}
	if err := m.NodePool(pool("plain", nil), term("nodesize", "x")); err == nil {
		t.Fatal("custom label served by a pool that does not define it")
	}
}

func TestMatcherNodePoolErrorNamesLabel(t *testing.T) {
	err := NewMatcher().NodePool(pool("plain", nil), term("nodsize", "a"))
	if err == nil || !strings.Contains(err.Error(), `"nodsize"`) || !strings.Contains(err.Error(), `"plain"`) {
		t.Fatalf("error %v should name the pool and the label", err)
	}
}

func TestMatcherNodePoolInvalidRequirements(t *testing.T) {
	m := NewMatcher()
	for _, np := range []*karpv1.NodePool{
		pool("no-value", nil, req(awsCPU, corev1.NodeSelectorOpGt)),
		pool("two-values", nil, req(awsCPU, karpv1.NodeSelectorOpLte, "1", "2")),
		pool("not-int", nil, req(awsCPU, corev1.NodeSelectorOpLt, "x")),
		pool("bad-op", nil, req(awsCPU, "Near", "1")),
	} {
		if err := m.NodePool(np, term(awsCPU, "4")); err == nil {
			t.Errorf("pool %s with an invalid requirement served a term", np.Name)
		}
	}
	if err := m.NodePool(nil, term(awsCPU, "4")); err == nil {
		t.Error("nil pool served a term")
	}
}

func TestNodePoolRequirementsDoNotModifyPool(t *testing.T) {
	np := pool("p", map[string]string{"a": "b"}, req(capType, corev1.NodeSelectorOpIn, "spot"))
	before := np.DeepCopy()
	if _, err := nodePoolRequirements(np); err != nil {
		t.Fatal(err)
	}
	if np.Spec.Template.Labels["karpenter.sh/nodepool"] != "" || len(np.Spec.Template.Labels) != 1 {
		t.Fatalf("template labels modified: %v", np.Spec.Template.Labels)
	}
	if before.Spec.Template.Spec.Requirements[0].Values[0] != np.Spec.Template.Spec.Requirements[0].Values[0] {
		t.Fatal("requirements modified")
	}
}

func TestMatcherNodeGroup(t *testing.T) {
	m := NewMatcher()
	spotGroup := nodegroups.Group{
		Name:          "spot-4vcpu",
		CapacityType:  "SPOT",
		InstanceTypes: []string{"m5.xlarge", "m6i.xlarge"},
		Labels: map[string]string{
			"nodesize":                   "spot4vcpu16gb",
			nodegroups.LabelNodeGroup:    "spot-4vcpu",
			nodegroups.LabelCapacityType: "SPOT",
			arch:                         "amd64",
			corev1.LabelOSStable:         "linux",
		},
	}
	custom := nodegroups.Group{
		Name:   "custom-ami",
		Labels: map[string]string{nodegroups.LabelNodeGroup: "custom-ami", nodegroups.LabelCapacityType: "ON_DEMAND"},
	}
	cases := []struct {
		name  string
		g     nodegroups.Group
		term  map[string]string
		serve bool
	}{
		{"group label", spotGroup, term("nodesize", "spot4vcpu16gb"), true},
		{"group label other value", spotGroup, term("nodesize", "od4vcpu16gb"), false},
		{"EKS capacity type", spotGroup, term(nodegroups.LabelCapacityType, "SPOT"), true},
		{"EKS capacity type other value", spotGroup, term(nodegroups.LabelCapacityType, "ON_DEMAND"), false},
		{"group name", spotGroup, term(nodegroups.LabelNodeGroup, "spot-4vcpu"), true},
		{"Karpenter capacity type is never on group nodes", spotGroup, term(capType, "spot"), false},
		{"Karpenter nodepool is never on group nodes", spotGroup, term(karpv1.NodePoolLabelKey, "spot"), false},
		{"instance type in the group", spotGroup, term(instType, "m6i.xlarge"), true},
		{"instance type not in the group", spotGroup, term(instType, "c5.large"), false},
		{"arch from the AMI type", spotGroup, term(arch, "amd64"), true},
		{"other arch", spotGroup, term(arch, "arm64"), false},
		{"zone is unknown but on every node", spotGroup, term(zone, "eu-west-1b"), true},
		{"custom label undefined", spotGroup, term("team", "a"), false},
		{"AWS Karpenter label is not on group nodes", spotGroup, term(awsCPU, "4"), false},
		{"unknown instance types may serve", custom, term(instType, "c5.large"), true},
		{"unknown arch may serve", custom, term(arch, "arm64"), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := m.NodeGroup(tc.g, tc.term)
			if (err == nil) != tc.serve {
				t.Fatalf("NodeGroup(%s, %v) = %v, want serve=%v", tc.g.Name, tc.term, err, tc.serve)
			}
		})
	}
}

func TestMatcherNode(t *testing.T) {
	m := NewMatcher()
	labels := map[string]string{capType: "spot", "nodesize": "spot4vcpu16gb", "failure-domain.beta.kubernetes.io/zone": "eu-west-1a"}
	cases := []struct {
		term  map[string]string
		serve bool
	}{
		{term(capType, "spot"), true},
		{term(capType, "spot", "nodesize", "spot4vcpu16gb"), true},
		{term(capType, "on-demand"), false},
		{term(capType, "spot", "nodesize", "spot8vcpu32gb"), false},
		{term("team", "a"), false},
		{term(zone, "eu-west-1a"), true}, // only the deprecated key is on the node
		{term(zone, "eu-west-1b"), false},
		{term(arch, "amd64"), false}, // well-known labels are not assumed on a node
	}
	for _, tc := range cases {
		if err := m.Node(labels, tc.term); (err == nil) != tc.serve {
			t.Errorf("Node(%v) = %v, want serve=%v", tc.term, err, tc.serve)
		}
	}
}

// A set term is served by a NodePool, node group or node that allows one of its values.
func TestMatcherSetTerm(t *testing.T) {
	m := NewMatcher()
	set := map[string]string{karpv1.CapacityTypeLabelKey: "reserved|on-demand"}
	for _, tc := range []struct {
		name  string
		np    *karpv1.NodePool
		serve bool
	}{
		{"reserved only", pool("r", nil, req(karpv1.CapacityTypeLabelKey, corev1.NodeSelectorOpIn, "reserved")), true},
		{"on-demand and spot", pool("o", nil, req(karpv1.CapacityTypeLabelKey, corev1.NodeSelectorOpIn, "on-demand", "spot")), true},
		{"unconstrained", pool("u", nil), true},
		{"spot only", pool("s", nil, req(karpv1.CapacityTypeLabelKey, corev1.NodeSelectorOpIn, "spot")), false},
		{"anything but reserved and on-demand", pool("n", nil, req(karpv1.CapacityTypeLabelKey, corev1.NodeSelectorOpNotIn, "reserved", "on-demand")), false},
	} {
		if err := m.NodePool(tc.np, set); (err == nil) != tc.serve {
			t.Errorf("%s: NodePool = %v, want served %v", tc.name, err, tc.serve)
		}
	}
	for v, serve := range map[string]bool{"reserved": true, "on-demand": true, "spot": false} {
		if err := m.Node(map[string]string{karpv1.CapacityTypeLabelKey: v}, set); (err == nil) != serve {
			t.Errorf("a %s node: Node = %v, want served %v", v, err, serve)
		}
	}
	g := nodegroups.Group{Name: "g", Labels: map[string]string{"tier": "b"}}
	if err := m.NodeGroup(g, map[string]string{"tier": "a|b"}); err != nil {
		t.Errorf("a node group with one value of the set: %v", err)
	}
	if err := m.NodeGroup(g, map[string]string{"tier": "a|c"}); err == nil {
		t.Error("a node group with no value of the set serves it")
	}
	its, cts, err := Offerings(pool("r", nil, req(karpv1.CapacityTypeLabelKey, corev1.NodeSelectorOpIn, "reserved", "spot")), set)
	if err != nil || its != nil || !slices.Equal(cts, []string{"reserved"}) {
		t.Errorf("Offerings = %v %v %v, want capacity types [reserved]", its, cts, err)
	}
}
