package converge

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/unavailability"
)

// The planner holds non-urgent moves outside the window, before the minimum stay and
// past the cap, and lets the moves that protect availability through at any time.
func TestPlanTiming(t *testing.T) {
	noon := time.Date(2026, 1, 14, 12, 0, 0, 0, time.UTC)
	nightly := func(extra string) *strategy.Window {
		w, err := strategy.ParseWindow("schedule=0 2 * * *; duration=1h" + extra)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	opens := time.Date(2026, 1, 15, 2, 0, 0, 0, time.UTC)
	drifted := []*corev1.Pod{pod(1, 1, "on-demand", true, 0), pod(2, 1, "on-demand", true, 0), pod(3, 1, "on-demand", true, 0)}
	stranded := []*corev1.Pod{pod(1, 1, "on-demand", true, 0), pod(2, 2, "spot", false, time.Hour), pod(3, 2, "spot", false, time.Hour)}
	returning := fallbackPods(3)
	for _, p := range returning {
		p.CreationTimestamp = metav1.NewTime(noon.Add(-5 * time.Minute))
	}
	unplaced := pod(3, 2, "spot", true, 0)
	delete(unplaced.Annotations, strategy.AnnotationSeat)
	delete(unplaced.Annotations, strategy.AnnotationTerm)
	delete(unplaced.Labels, strategy.LabelManaged)
	unplaced.Spec.NodeSelector = nil
	tests := []struct {
		name   string
		now    time.Time
		pods   []*corev1.Pod
		timing strategy.Timing
		edit   func(*snapshot, *memory)
		evict  []string
		// waiting: by what (waitNames); blocked: a part of the message; until: the next pass.
		waiting [waitKinds]int
		blocked string
		until   time.Time
	}{
		{name: "drift waits outside the window, until it opens", now: noon, pods: drifted, timing: strategy.Timing{Window: nightly("")},
			waiting: [waitKinds]int{waitWindow: 2}, blocked: "moves wait for window \"schedule=0 2 * * *; duration=1h0m0s\" (set by the cluster's MOVE_WINDOW; opens at 2026-01-15T02:00:00Z)", until: opens},
		{name: "drift moves inside the window", now: opens.Add(30 * time.Minute), pods: drifted, timing: strategy.Timing{Window: nightly("")},
			evict: []string{"web-3", "web-2"}},
		{name: "stranded pods move outside the window", now: noon, pods: stranded, timing: strategy.Timing{Window: nightly("")},
			edit: func(s *snapshot, _ *memory) {
				s.active = map[int]unavailability.TermState{1: {Until: noon.Add(time.Hour)}}
			}, evict: []string{"web-3", "web-2"}},
		{name: "an unplaced pod moves outside the window", now: noon, pods: drifted[:2], timing: strategy.Timing{Window: nightly("")},
			edit: func(s *snapshot, _ *memory) {
				s.rev.replicas = 3
				s.unplaced = []clusterview.PlacedPod{clusterview.PlacedPodOf(unplaced)}
			}, evict: []string{"web-3"}, waiting: [waitKinds]int{waitWindow: 1}, until: opens},
		{name: "a return waits for the minimum stay", now: noon, pods: returning, timing: strategy.Timing{MinStay: 10 * time.Minute, MinStaySource: "Deployment shop/web"},
			edit: func(s *snapshot, _ *memory) {
				s.rec = &unavailability.Record{Terms: map[int]unavailability.TermState{1: {Until: noon.Add(-time.Minute)}}}
			}, waiting: [waitKinds]int{waitStay: 1}, blocked: "minimum stay on fallback of 10m0s (set on Deployment shop/web)", until: noon.Add(5 * time.Minute)},
		{name: "the cap lets one move through per opening", now: opens.Add(time.Minute), pods: drifted, timing: strategy.Timing{Window: nightly("; maxMoves=1")},
			evict: []string{"web-3"}, waiting: [waitKinds]int{waitCap: 1}, until: opens.Add(24 * time.Hour)},
		{name: "the cap reached holds the rest until the next opening", now: opens.Add(time.Minute), pods: drifted, timing: strategy.Timing{Window: nightly("; maxMoves=1")},
			edit:    func(_ *snapshot, m *memory) { m.noteWindowMove(revisionOpening{rsUID, opens}) },
			waiting: [waitKinds]int{waitCap: 2}, blocked: "cap of 1 moves is reached", until: opens.Add(24 * time.Hour)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := strategy.Parse(strat)
			if err != nil {
				t.Fatal(err)
			}
			snap := &snapshot{rev: revision{uid: rsUID, namespace: ns, name: "web-1", kind: "ReplicaSet", replicas: len(tc.pods)},
				s: s, now: tc.now, signals: map[int]capacitySignal{}, timing: tc.timing}
			for _, p := range tc.pods {
				snap.pods = append(snap.pods, clusterview.PlacedPodOf(p))
			}
			snap.survey = surveyPods(snap.pods, s, tc.now, 20*time.Second)
			mem := newMemory()
			if tc.edit != nil {
				tc.edit(snap, &mem)
			}
			got := plan(snap, &mem, planConfig{fallbackAfter: 20 * time.Second, maxUnavailable: intstr.FromString("100%")})
			var evict []string
			for _, m := range got.evict {
				evict = append(evict, m.pod.Name)
				if capped := tc.timing.Window != nil && tc.timing.Window.MaxMoves > 0 && !urgent(m.reason); capped == m.opening.IsZero() {
					t.Errorf("%s: opening %s, want one exactly when a cap counts it", m.pod.Name, m.opening)
				}
			}
			if !slices.Equal(evict, tc.evict) || got.res.waiting != tc.waiting || !strings.Contains(got.blocked, tc.blocked) || !got.heldUntil.Equal(tc.until) {
				t.Errorf("evict %v, waiting %v, blocked %q, until %s; want %v, %v, %q, %s", evict, got.res.waiting, got.blocked, got.heldUntil, tc.evict, tc.waiting, tc.blocked, tc.until)
			}
		})
	}
}
