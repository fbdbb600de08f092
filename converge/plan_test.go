package converge

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/karpenter"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/unavailability"
)

// plan decides from a snapshot alone: these cases need no client and no cache.
func TestPlan(t *testing.T) {
	now := time.Now()
	spotWaiting := func(n int, age time.Duration) []*corev1.Pod {
		pods := []*corev1.Pod{pod(1, 1, "on-demand", true, 0)}
		for seat := 2; seat <= n; seat++ {
			pods = append(pods, pod(seat, 2, "spot", false, age))
		}
		return pods
	}
	drifted := func(n int, from int) []*corev1.Pod { // seats from..n Ready on on-demand, off their spot seat
		pods := []*corev1.Pod{pod(1, 1, "on-demand", true, 0)}
		for seat := 2; seat <= n; seat++ {
			if seat >= from {
				pods = append(pods, pod(seat, 1, "on-demand", true, 0))
			} else {
				pods = append(pods, pod(seat, 2, "spot", true, 0))
			}
		}
		return pods
	}
	tests := []struct {
		name     string
		replicas int
		pods     []*corev1.Pod
		edit     func(*snapshot)
		max      intstr.IntOrString
		// want: the struck terms (0-based), the pods evict holds in order, the budget,
		// and the note kinds.
		strikes []int
		evict   []string
		budget  int
		notes   []noteKind
		blocked bool
	}{
		{name: "at its placement", replicas: 4, pods: drifted(4, 5)},
		{name: "young pending pods strike nothing", replicas: 4, pods: spotWaiting(4, 5*time.Second)},
		{name: "stranded pods strike their term, and nothing moves in that pass", replicas: 4, pods: spotWaiting(4, 30*time.Second), strikes: []int{1}},
		{name: "Karpenter's word strikes a waiting term", replicas: 4, pods: spotWaiting(4, 5*time.Second),
			edit: func(s *snapshot) { s.signals[1] = capacitySignal{word: "Karpenter: exceed limits"} }, strikes: []int{1}},
		{name: "stranded pods Karpenter launches for strike nothing, said once", replicas: 4, pods: spotWaiting(4, 30*time.Second),
			edit: func(s *snapshot) {
				s.signals[1] = capacitySignal{flight: &karpenter.Flight{Launching: 1, LastProgress: s.now}}
			}, notes: []noteKind{noteLaunching}},
		{name: "drift moves the highest seats within the budget", replicas: 10, pods: drifted(10, 9), max: intstr.FromInt32(1),
			evict: []string{"web-10", "web-9"}, budget: 1},
		{name: "a rollout's budget is 0", replicas: 10, pods: drifted(10, 9), edit: func(s *snapshot) { s.rev.rolling = true },
			evict: []string{"web-10", "web-9"}, budget: 0},
		{name: "an opted-out workload moves nothing and says why", replicas: 10, pods: drifted(10, 9),
			edit: func(s *snapshot) { s.hold = "a policy is suspended" }, blocked: true},
		{name: "a do-not-disrupt pod stays, the next drifted pod moves", replicas: 10, pods: drifted(10, 9), max: intstr.FromInt32(1),
			edit: func(s *snapshot) { s.pods[9].DoNotDisrupt = true }, evict: []string{"web-9"}, budget: 1, notes: []noteKind{notePinned}},
		{name: "a seat held twice keeps its do-not-disrupt holder", replicas: 5, pods: drifted(4, 5), max: intstr.FromInt32(1),
			edit: func(s *snapshot) {
				twin := clusterview.PlacedPodOf(pod(2, 2, "spot", true, 0))
				twin.Name, twin.UID, twin.DoNotDisrupt = "web-2b", "pod-2b", true
				s.pods = append(s.pods, twin)
			}, evict: []string{"web-2"}, budget: 1},
		{name: "a return starts with a canary per term", replicas: 4, pods: fallbackPods(4), max: intstr.FromString("50%"),
			edit: func(s *snapshot) {
				s.rec = &unavailability.Record{Terms: map[int]unavailability.TermState{1: {Until: s.now.Add(-time.Second)}}}
			}, evict: []string{"web-4"}, budget: 2, notes: []noteKind{noteTermBack, noteTermBack, noteTermBack, noteCanary}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := strategy.Parse(strat)
			if err != nil {
				t.Fatal(err)
			}
			snap := &snapshot{rev: revision{uid: rsUID, namespace: ns, name: "web-1", kind: "ReplicaSet", replicas: tc.replicas},
				s: s, now: now, signals: map[int]capacitySignal{}}
			for _, p := range tc.pods {
				snap.pods = append(snap.pods, clusterview.PlacedPodOf(p))
			}
			snap.survey = surveyPods(snap.pods, s, now, 20*time.Second)
			if tc.edit != nil {
				tc.edit(snap)
			}
			mem := newMemory()
			got := plan(snap, &mem, planConfig{fallbackAfter: 20 * time.Second, maxUnavailable: tc.max})
			var struck []int
			for _, st := range got.strikes {
				struck = append(struck, st.term)
			}
			var evict []string
			for _, m := range got.evict {
				evict = append(evict, m.pod.Name)
			}
			var notes []noteKind
			for _, n := range got.notes {
				notes = append(notes, n.key.kind)
			}
			if !slices.Equal(struck, tc.strikes) || !slices.Equal(evict, tc.evict) || !slices.Equal(notes, tc.notes) ||
				(len(evict) > 0 && got.budget != tc.budget) || (got.blocked != "") != tc.blocked {
				t.Errorf("strikes %v, evict %v (budget %d), notes %v, blocked %q; want %v, %v (budget %d), %v, blocked %v",
					struck, evict, got.budget, notes, got.blocked, tc.strikes, tc.evict, tc.budget, tc.notes, tc.blocked)
			}
		})
	}
}
