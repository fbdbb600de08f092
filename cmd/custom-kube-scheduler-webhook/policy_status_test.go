package main

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// A Rollout's exact count is read from its one ReplicaSet with replicas; none while
// two have replicas (a canary, a blue-green preview) or before the first has any.
func TestRolloutRevision(t *testing.T) {
	rs := func(name, ns string, replicas int32) *appsv1.ReplicaSet {
		return &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To(replicas)}}
	}
	for _, tc := range []struct {
		name      string
		sets      []*appsv1.ReplicaSet
		want, why string
	}{
		{"one active", []*appsv1.ReplicaSet{rs("old", "shop", 0), rs("new", "shop", 3)}, "new", ""},
		{"canary", []*appsv1.ReplicaSet{rs("stable", "shop", 3), rs("canary", "shop", 1)}, "", "the Rollout is moving pods between its ReplicaSets"},
		{"none yet", []*appsv1.ReplicaSet{rs("new", "shop", 0)}, "", noRevision},
		{"another namespace's", []*appsv1.ReplicaSet{rs("forged", "elsewhere", 3)}, "", noRevision},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := rolloutRevision(tc.sets, "shop")
			name := ""
			if got != nil {
				name = got.Name
			}
			if name != tc.want || why != tc.why {
				t.Errorf("got %q (%q), want %q (%q)", name, why, tc.want, tc.why)
			}
		})
	}
}
