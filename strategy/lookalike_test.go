package strategy

import (
	"strings"
	"testing"
)

func TestClosest(t *testing.T) {
	keys := []string{"karpenter.sh/capacity-type", "kubernetes.io/arch", "node.kubernetes.io/instance-type", "karpenter.sh/nodepool"}
	for word, want := range map[string]string{
		"karpenter.sh/capcity-type":  "karpenter.sh/capacity-type",
		"karpenter.sh/capacity_type": "karpenter.sh/capacity-type",
		"kubernetes.io/arhc":         "kubernetes.io/arch",
		"karpenter.sh/capacity-type": "", // itself: no hint
		"team":                       "",
		"example.com/gpu":            "",
	} {
		if got := Closest(word, keys); got != want {
			t.Errorf("Closest(%q) = %q, want %q", word, got, want)
		}
	}
	if got := Closest("spto", []string{"on-demand", "spot", "reserved"}); got != "spot" {
		t.Errorf("Closest(spto) = %q, want spot", got)
	}
	if got := Closest("ondemand", []string{"on-demand", "spot"}); got != "on-demand" {
		t.Errorf("Closest(ondemand) = %q, want on-demand", got)
	}
}

func TestLookalikeKeys(t *testing.T) {
	obj := AnnotatedObject{Name: "Deployment shop/web", Annotations: map[string]string{
		"CustomPodSchedulingStrategy":           "x",
		"custompodschedulestrategy":             "x",
		"example.com/CustomPodScheduleStrategy": "x",
		"UseCustomKubeSchedular":                "true",
		AnnotationStrategy:                      "x",
		"deployment.kubernetes.io/revision":     "3",
		"team":                                  "payments",
	}}
	got := strings.Join(LookalikeKeys(obj), "\n")
	for _, want := range []string{
		`annotation "CustomPodSchedulingStrategy" is not read; did you mean "CustomPodScheduleStrategy"?`,
		`annotation "custompodschedulestrategy" is not read`,
		`annotation "example.com/CustomPodScheduleStrategy" is not read`,
		`annotation "UseCustomKubeSchedular" is not read; did you mean "UseCustomKubeScheduler"?`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("want %q in:\n%s", want, got)
		}
	}
	if n := len(LookalikeKeys(obj)); n != 4 {
		t.Errorf("%d warnings, want 4:\n%s", n, got)
	}
}
