package clusterview

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// A Rollout's exact count is read from its current ReplicaSet; not while two have
// replicas (a canary, a blue-green preview) or before the current one has any.
func TestRolloutNotCounted(t *testing.T) {
	rs := func(name string, revision string, replicas int32) *appsv1.ReplicaSet {
		return &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", UID: types.UID("uid-" + name),
			Annotations:     map[string]string{"rollout.argoproj.io/revision": revision},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "argoproj.io/v1alpha1", Kind: "Rollout", Name: "web", UID: "ro", Controller: ptr.To(true)}}},
			Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To(replicas)}}
	}
	for _, tc := range []struct {
		name string
		sets []*appsv1.ReplicaSet
		why  string
	}{
		{"one active", []*appsv1.ReplicaSet{rs("old", "1", 0), rs("new", "2", 3)}, ""},
		{"canary", []*appsv1.ReplicaSet{rs("stable", "1", 3), rs("canary", "2", 1)}, "the Rollout is moving pods between its ReplicaSets"},
		{"none yet", []*appsv1.ReplicaSet{rs("new", "1", 0)}, noRevision},
		{"no ReplicaSet", nil, noRevision},
	} {
		t.Run(tc.name, func(t *testing.T) {
			views := Views(Objects{ReplicaSets: tc.sets, Rollouts: []*metav1.ObjectMeta{{Namespace: "shop", Name: "web", UID: "ro"}}})
			if len(views) != 1 {
				t.Fatalf("got %d views, want the Rollout's alone", len(views))
			}
			if why := notCounted(&views[0]); why != tc.why {
				t.Errorf("got %q, want %q", why, tc.why)
			}
		})
	}
}
