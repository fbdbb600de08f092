package placement

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook/internal/webhooktest"
)

// unavailable is a fixed Availability: these 0-based terms of every revision.
type unavailable map[int]string

func (u unavailable) Unavailable(types.UID) map[int]string { return u }

// While the spot term is unavailable, its seats go to on-demand: the pod keeps its seat,
// selects on-demand, and says where its seat belongs; the on-demand base stays as it is.
func TestFallbackPlacement(t *testing.T) {
	m, _, _ := newCluster("karpenter.sh/capacity-type=on-demand,base=1:karpenter.sh/capacity-type=spot,weight=3").mutator(t)
	m.Availability = unavailable{1: "until 2026-01-01T00:00:00Z: 3 pods unschedulable for 90s"}
	for seat := 1; seat <= 3; seat++ {
		req := webhooktest.CreateRequest(t, webhooktest.RSPod(testNS, testRSUID))
		resp := m.Admit(context.Background(), req)
		pod := applyPatch(t, req, resp)
		if got := pod.Spec.NodeSelector["karpenter.sh/capacity-type"]; got != "on-demand" {
			t.Errorf("seat %d: capacity-type %q, want on-demand", seat, got)
		}
		if pod.Annotations[strategy.AnnotationTerm] != "1" {
			t.Errorf("seat %d: term annotation %q, want 1", seat, pod.Annotations[strategy.AnnotationTerm])
		}
		from, fallback := pod.Annotations[strategy.AnnotationFallbackFrom]
		switch {
		case seat == 1 && fallback:
			t.Errorf("seat 1 is on its own term, yet marked fallback-from %q", from)
		case seat > 1 && from != "2":
			t.Errorf("seat %d: fallback-from %q, want 2", seat, from)
		case seat > 1 && !strings.Contains(strings.Join(resp.Warnings, "\n"), "unavailable"):
			t.Errorf("seat %d: no warning about the fallback: %v", seat, resp.Warnings)
		}
	}
}

// With nothing left to fall back on, the pod goes to its own term, with a warning.
func TestNoFallbackTerm(t *testing.T) {
	m, _, _ := newCluster("karpenter.sh/capacity-type=on-demand,base=1:karpenter.sh/capacity-type=spot,weight=3").mutator(t)
	m.Availability = unavailable{0: "x", 1: "y"}
	req := webhooktest.CreateRequest(t, webhooktest.RSPod(testNS, testRSUID))
	resp := m.Admit(context.Background(), req)
	pod := applyPatch(t, req, resp)
	if _, ok := pod.Annotations[strategy.AnnotationFallbackFrom]; ok || pod.Spec.NodeSelector["karpenter.sh/capacity-type"] != "on-demand" {
		t.Errorf("seat 1 with every term unavailable: %v %v, want its own term", pod.Annotations, pod.Spec.NodeSelector)
	}
	if !strings.Contains(strings.Join(resp.Warnings, "\n"), "no other term") {
		t.Errorf("no warning that there is no fallback: %v", resp.Warnings)
	}
}
