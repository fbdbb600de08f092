package main

import (
	"encoding/json"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

func newFloor() *floor {
	return &floor{seats: map[types.UID]int{}, strategies: map[string]*strategy.Strategy{}}
}

func floorPod(strat string, nodeSelector map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "p", Annotations: map[string]string{"CustomPodScheduleStrategy": strat},
			OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "rs", UID: "rs-uid", Controller: new(bool)}},
		},
		Spec: corev1.PodSpec{NodeSelector: nodeSelector},
	}
}

// apply applies the floor's patch to pod as the API server would.
func apply(t *testing.T, pod *corev1.Pod, patch []byte) *corev1.Pod {
	t.Helper()
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		t.Fatalf("patch %s: %v", patch, err)
	}
	doc, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.Apply(doc)
	if err != nil {
		t.Fatalf("applying %s: %v", patch, err)
	}
	var got corev1.Pod
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	return &got
}

// The floor places a revision's pods in the strategy's sequence (so a floor burst
// lands on the same capacity kinds as serve's), with or without a nodeSelector of
// their own; a dry run takes no seat.
func TestFloorPlacesInSequence(t *testing.T) {
	const strat = "karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3"
	s, err := strategy.Parse(strat)
	if err != nil {
		t.Fatal(err)
	}
	f := newFloor()
	controller := func(p *corev1.Pod) *corev1.Pod { *p.OwnerReferences[0].Controller = true; return p }
	if patch := f.place(controller(floorPod(strat, nil)), true); patch == nil {
		t.Fatal("dry run not answered")
	}
	for seat := 1; seat <= 10; seat++ {
		var own map[string]string
		if seat%2 == 0 {
			own = map[string]string{"team": "a"}
		}
		pod := controller(floorPod(strat, own))
		got := apply(t, pod, f.place(pod, false))
		if got.Annotations[strategy.AnnotationSeat] != itoa(seat) {
			t.Fatalf("pod %d got seat %q", seat, got.Annotations[strategy.AnnotationSeat])
		}
		want := s.Terms[s.TermOfSeat(seat)].Labels[0]
		if got.Spec.NodeSelector[want.Key] != want.Value || (own != nil && got.Spec.NodeSelector["team"] != "a") {
			t.Fatalf("seat %d: nodeSelector %v, want %s=%s", seat, got.Spec.NodeSelector, want.Key, want.Value)
		}
	}
}

func TestFloorLeavesOthersAlone(t *testing.T) {
	f := newFloor()
	ownerless := floorPod("a=b", nil)
	ownerless.OwnerReferences = nil
	for name, pod := range map[string]*corev1.Pod{
		"no controller":    floorPod("a=b", nil), // Controller false
		"no owner":         ownerless,
		"invalid strategy": floorPod("a=b,weight=x", nil),
		"no strategy":      floorPod("", nil),
	} {
		if pod.OwnerReferences != nil && name != "no controller" {
			*pod.OwnerReferences[0].Controller = true
		}
		if patch := f.place(pod, false); patch != nil {
			t.Errorf("%s: patched %s", name, patch)
		}
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }
