package report

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/api/v1alpha1"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/policy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// A Rollout's ReplicaSets are reported under the Rollout, as the webhook places them:
// its newest ReplicaSet counted for its own replicas, the other's pods a total; the
// strategy from the Rollout's annotation, else a policy for kind Rollout. Without the
// Rollout (not served) the ReplicaSet is a bare one.
func TestBuildReportsRollouts(t *testing.T) {
	rs := func(name string, owner types.UID, revision string, replicas int32) appsv1.ReplicaSet {
		return appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "demo", UID: types.UID(name),
			Annotations:     map[string]string{"rollout.argoproj.io/revision": revision},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "argoproj.io/v1alpha1", Kind: "Rollout", Name: "web", UID: owner, Controller: ptr.To(true)}}},
			Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To(replicas)}}
	}
	pod := func(owner string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: owner + "-x", Namespace: "demo",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: owner, UID: types.UID(owner), Controller: ptr.To(true)}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	}
	pol := v1alpha1.PlacementPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "rollouts"},
		Spec: v1alpha1.PlacementPolicySpec{Strategy: reportStrategy, Kinds: []v1alpha1.WorkloadKind{v1alpha1.KindRollout}}}
	state := func(rolloutAnnotations map[string]string, served bool) *State {
		st := &State{
			ReplicaSets: []appsv1.ReplicaSet{rs("web-1", "ro-uid", "1", 3), rs("web-2", "ro-uid", "2", 1)},
			Pods:        []corev1.Pod{pod("web-1"), pod("web-1"), pod("web-2")},
			Policies:    policy.NewIndex([]v1alpha1.PlacementPolicy{pol}, nil, nil),
		}
		if served {
			st.Rollouts = []metav1.ObjectMeta{{Namespace: "demo", Name: "web", UID: "ro-uid", Annotations: rolloutAnnotations}}
		}
		return st
	}
	keepAll := func(string, string) bool { return true }

	r := Build(state(nil, true), keepAll)
	if len(r.Workloads) != 1 {
		t.Fatalf("workloads %+v, want the Rollout alone", r.Workloads)
	}
	w := r.Workloads[0]
	if w.Kind != "Rollout" || w.Name != "web" || w.Revision != "web-2" || w.Replicas != 1 || w.OtherRevisions != 2 || w.Source != "PlacementPolicy demo/rollouts" {
		t.Errorf("got %s %s revision %s replicas %d others %d source %q; want Rollout web, revision web-2 of 1 replica, 2 other pods, from the policy",
			w.Kind, w.Name, w.Revision, w.Replicas, w.OtherRevisions, w.Source)
	}

	own := "capacity=spot"
	if w := Build(state(map[string]string{strategy.AnnotationStrategy: own}, true), keepAll).Workloads[0]; w.Source != "Rollout demo/web" || w.Strategy != own {
		t.Errorf("annotated Rollout: %q from %q, want its own", w.Strategy, w.Source)
	}
	if ws := Build(state(nil, true), func(kind, _ string) bool { return kind == "Deployment" }).Workloads; len(ws) != 0 {
		t.Errorf("kept only Deployments, got %+v", ws)
	}
	// Not served: bare ReplicaSets, which the kind-Rollout policy does not select.
	if ws := Build(state(nil, false), keepAll).Workloads; len(ws) != 0 {
		t.Errorf("without Rollouts: %+v, want nothing (no strategy for bare ReplicaSets)", ws)
	}
}

// A Rollout its controller has not given a ReplicaSet yet is reported: its strategy
// (from its pod template here) and target for its replicas, 0 pods, and why; not exact.
// One without an active strategy is not reported.
func TestBuildReportsRolloutWithoutReplicaSet(t *testing.T) {
	keepAll := func(string, string) bool { return true }
	st := &State{
		Rollouts: []metav1.ObjectMeta{{Namespace: "demo", Name: "web", UID: "ro-uid"}, {Namespace: "demo", Name: "plain", UID: "plain-uid"}},
		RolloutSpecs: map[types.UID]RolloutSpec{
			"ro-uid":    {Replicas: ptr.To(int32(4)), TemplateAnnotations: map[string]string{strategy.AnnotationStrategy: reportStrategy}},
			"plain-uid": {Replicas: ptr.To(int32(2))},
		},
	}
	r := Build(st, keepAll)
	if len(r.Workloads) != 1 {
		t.Fatalf("workloads %+v, want Rollout web alone", r.Workloads)
	}
	w := r.Workloads[0]
	placed := 0
	for _, term := range w.Terms {
		placed += term.Placed
	}
	if w.Kind != "Rollout" || w.Name != "web" || w.Replicas != 4 || w.Revision != "" || placed != 0 || w.Exact ||
		w.Source != "the pod template of Rollout demo/web" || !strings.Contains(w.NoRevision, "no ReplicaSet yet") {
		t.Errorf("got %+v; want Rollout web, 4 replicas, 0 pods, not exact, from its pod template, no ReplicaSet yet", w)
	}
	if got := Build(st, func(kind, _ string) bool { return kind == "Deployment" }).Workloads; len(got) != 0 {
		t.Errorf("kept only Deployments, got %+v", got)
	}
}
