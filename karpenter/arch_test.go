package karpenter

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
)

func TestArchitecturesOfCapacity(t *testing.T) {
	pool := func(reqs ...karpv1.NodeSelectorRequirementWithMinValues) *karpv1.NodePool {
		np := &karpv1.NodePool{}
		np.Name = "p"
		np.Spec.Template.Spec.Requirements = reqs
		return np
	}
	arch := func(op corev1.NodeSelectorOperator, values ...string) karpv1.NodeSelectorRequirementWithMinValues {
		return karpv1.NodeSelectorRequirementWithMinValues{Key: corev1.LabelArchStable, Operator: op, Values: values}
	}
	both := []string{"amd64", "arm64"}
	for _, tc := range []struct {
		name string
		np   *karpv1.NodePool
		term map[string]string
		want []string
	}{
		{"arch left open: both (no default since Karpenter v1)", pool(), nil, both},
		{"In amd64", pool(arch(corev1.NodeSelectorOpIn, "amd64")), nil, []string{"amd64"}},
		{"NotIn arm64", pool(arch(corev1.NodeSelectorOpNotIn, "arm64")), nil, []string{"amd64"}},
		{"In both", pool(arch(corev1.NodeSelectorOpIn, "arm64", "amd64")), nil, both},
		{"the term pins arm64", pool(), map[string]string{corev1.LabelArchStable: "arm64"}, []string{"arm64"}},
		{"the term pins what the pool lacks", pool(arch(corev1.NodeSelectorOpIn, "amd64")), map[string]string{"beta.kubernetes.io/arch": "arm64"}, nil},
	} {
		if got := nodePoolArchitectures(tc.np, tc.term); !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
	if got := labelArchitectures(map[string]string{corev1.LabelArchStable: "arm64"}, nil); !slices.Equal(got, []string{"arm64"}) {
		t.Errorf("an arm64 node: %v", got)
	}
	if got := labelArchitectures(map[string]string{"beta.kubernetes.io/arch": "amd64"}, map[string]string{corev1.LabelArchStable: "arm64"}); got != nil {
		t.Errorf("an amd64 node for an arm64 term: %v", got)
	}
	if got := labelArchitectures(nil, nil); !slices.Equal(got, both) {
		t.Errorf("a node group of unknown AMI: %v", got)
	}
	srcs := []Source{{Architectures: []string{"arm64"}}, {Architectures: []string{"amd64"}}, {Architectures: []string{"arm64"}}}
	if got := architecturesOf(srcs); !slices.Equal(got, both) {
		t.Errorf("architecturesOf = %v", got)
	}
}
