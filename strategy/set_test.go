package strategy

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestParseSetOfValues(t *testing.T) {
	s, err := Parse(" karpenter.sh/capacity-type = reserved | on-demand ,zone=a,base=3:karpenter.sh/capacity-type=spot")
	if err != nil {
		t.Fatal(err)
	}
	want := []Term{
		{Labels: []Label{{CapacityTypeLabel, "reserved|on-demand"}, {"zone", "a"}}, Base: 3},
		{Labels: []Label{{CapacityTypeLabel, "spot"}}, Weight: 1},
	}
	if !reflect.DeepEqual(s.Terms, want) {
		t.Fatalf("terms = %+v, want %+v", s.Terms, want)
	}
	if got := s.String(); got != "karpenter.sh/capacity-type=reserved|on-demand,zone=a,base=3,weight=0:karpenter.sh/capacity-type=spot,base=0,weight=1" {
		t.Errorf("canonical form %q", got)
	}
	if l := s.Terms[0].Labels[0]; !l.IsSet() || !reflect.DeepEqual(l.Values(), []string{"reserved", "on-demand"}) || s.Terms[1].Labels[0].IsSet() {
		t.Errorf("Values/IsSet disagree with the parsed labels")
	}
	if len(s.Warnings) != 0 {
		t.Errorf("unexpected warnings %v", s.Warnings)
	}
}

func TestParseSetErrors(t *testing.T) {
	for raw, reason := range map[string]string{
		"ct=a|":         "empty value",
		"ct=|a":         "empty value",
		"ct=a||b":       "empty value",
		"ct=a|a":        "given twice",
		"ct=a| a":       "given twice",
		"ct=a|b c":      "invalid",
		"ct=a|-b":       "invalid",
		"ct=a|b:ct=b|a": "same node labels",
	} {
		_, err := Parse(raw)
		var pe *ParseError
		if !errors.As(err, &pe) || !strings.Contains(pe.Reason, reason) {
			t.Errorf("Parse(%q) = %v, want a reason with %q", raw, err, reason)
		}
	}
}

func TestParseSetWarnsPerValue(t *testing.T) {
	s, err := Parse("karpenter.sh/capacity-type=reserved|ondemand")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Warnings) != 1 || !strings.Contains(s.Warnings[0], "karpenter.sh/capacity-type=ondemand") {
		t.Errorf("warnings %v, want one about ondemand", s.Warnings)
	}
}

func TestAdmits(t *testing.T) {
	set := Label{CapacityTypeLabel, "reserved|on-demand"}
	od := Label{CapacityTypeLabel, "on-demand"}
	for _, tc := range []struct {
		l    Label
		have string
		want bool
	}{
		{set, "reserved", true},
		{set, "on-demand", true},
		{set, "spot", false},
		{set, "on-demand|reserved", true}, // any order
		{set, "on-demand|spot", false},
		{od, "on-demand", true},
		{od, "reserved", false},          // a reserved node is not on an on-demand term
		{od, "on-demand|reserved", true}, // an on-demand term widened to accept reserved
		{od, "reserved|spot", false},
		{Label{"zone", "a"}, "a|b", false},
	} {
		if got := tc.l.Admits(tc.have); got != tc.want {
			t.Errorf("%s=%s admits %q: %v, want %v", tc.l.Key, tc.l.Value, tc.have, got, tc.want)
		}
	}
}

func TestTermOfSetPod(t *testing.T) {
	s, err := Parse("karpenter.sh/capacity-type=reserved|on-demand,base=2:karpenter.sh/capacity-type=spot")
	if err != nil {
		t.Fatal(err)
	}
	in := func(key string, values ...string) corev1.NodeSelectorRequirement {
		return corev1.NodeSelectorRequirement{Key: key, Operator: corev1.NodeSelectorOpIn, Values: values}
	}
	affinity := func(terms ...[]corev1.NodeSelectorRequirement) *corev1.Affinity {
		ns := &corev1.NodeSelector{}
		for _, t := range terms {
			ns.NodeSelectorTerms = append(ns.NodeSelectorTerms, corev1.NodeSelectorTerm{MatchExpressions: t})
		}
		return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: ns}}
	}
	set := in(CapacityTypeLabel, "reserved", "on-demand")
	arch := in(corev1.LabelArchStable, "amd64")
	for _, tc := range []struct {
		name     string
		affinity *corev1.Affinity
		selector map[string]string
		want     int
	}{
		{"patched set", affinity([]corev1.NodeSelectorRequirement{set}), nil, 0},
		{"set in every term", affinity([]corev1.NodeSelectorRequirement{arch, set}, []corev1.NodeSelectorRequirement{set}), nil, 0},
		{"set in one term only", affinity([]corev1.NodeSelectorRequirement{set}, []corev1.NodeSelectorRequirement{arch}), nil, -1},
		{"nodeSelector narrows the set", affinity([]corev1.NodeSelectorRequirement{set}), map[string]string{CapacityTypeLabel: "on-demand"}, 0},
		{"spot", nil, map[string]string{CapacityTypeLabel: "spot"}, 1},
		{"a wider set is on no term", affinity([]corev1.NodeSelectorRequirement{in(CapacityTypeLabel, "reserved", "spot")}), nil, -1},
	} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{}, Spec: corev1.PodSpec{Affinity: tc.affinity, NodeSelector: tc.selector}}
		if got := TermOf(s, pod); got != tc.want {
			t.Errorf("%s: TermOf = %d, want %d (selector %v)", tc.name, got, tc.want, PlacementSelector(pod))
		}
	}
	if !s.Terms[0].SelectedBy(map[string]string{CapacityTypeLabel: "reserved"}) || s.Terms[0].SelectedBy(map[string]string{CapacityTypeLabel: "spot"}) {
		t.Error("a node's single value is not read as a member of the set")
	}
}
