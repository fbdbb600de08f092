package main

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/policy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// governable lists the workloads a policy may govern from the webhook's caches:
// Deployments, StatefulSets and bare ReplicaSets, each marked Own when it decides its
// strategy itself (an annotation on it or its pod template, or the opt-out).
func governable(caches *clusterview.Caches, skip func(namespace string) bool) func() []policy.Governable {
	return func() []policy.Governable {
		var out []policy.Governable
		add := func(kind string, meta metav1.ObjectMeta, template map[string]string, revision func() (types.UID, int, bool)) {
			if skip(meta.Namespace) {
				return
			}
			src := strategy.Find(strategy.AnnotatedObject{Annotations: template}, strategy.AnnotatedObject{Annotations: meta.Annotations})
			g := policy.Governable{Workload: policy.Workload{Namespace: meta.Namespace, Kind: kind, Labels: meta.Labels}, Name: meta.Name, Own: src.Present || src.Disabled}
			if !g.Own {
				g.Exact = func(s *strategy.Strategy) (bool, string) {
					uid, replicas, ok := revision()
					if !ok {
						return false, "no current revision yet"
					}
					return exactNow(caches, clusterview.Revision{Namespace: meta.Namespace, UID: uid}, replicas, s)
				}
			}
			out = append(out, g)
		}
		r := caches.Resolver
		if deployments, err := r.Deployments.List(labels.Everything()); err == nil {
			for _, d := range deployments {
				add("Deployment", d.ObjectMeta, d.Spec.Template.Annotations, func() (types.UID, int, bool) {
					for _, rs := range caches.ReplicaSetsOf(d.UID) {
						if rs.Namespace == d.Namespace && rs.Annotations[deploymentRevision] == d.Annotations[deploymentRevision] {
							return rs.UID, replicasOf(d.Spec.Replicas), true
						}
					}
					return "", 0, false
				})
			}
		}
		if sets, err := r.StatefulSets.List(labels.Everything()); err == nil {
			for _, s := range sets {
				add("StatefulSet", s.ObjectMeta, s.Spec.Template.Annotations, func() (types.UID, int, bool) { return s.UID, replicasOf(s.Spec.Replicas), true })
			}
		}
		if sets, err := r.ReplicaSets.List(labels.Everything()); err == nil {
			for _, rs := range sets {
				if metav1.GetControllerOfNoCopy(rs) == nil {
					add("ReplicaSet", rs.ObjectMeta, rs.Spec.Template.Annotations, func() (types.UID, int, bool) { return rs.UID, replicasOf(rs.Spec.Replicas), true })
				}
			}
		}
		return out
	}
}

// deploymentRevision is the Deployment controller's revision annotation: a Deployment's
// current ReplicaSet carries the Deployment's value.
const deploymentRevision = "deployment.kubernetes.io/revision"

// replicasOf is spec.replicas, 1 when unset (the API server's default).
func replicasOf(r *int32) int {
	if r == nil {
		return 1
	}
	return int(*r)
}

// exactNow tells whether the live placed pods of revision hold exactly the target of s
// for replicas pods, and if not, what differs first.
func exactNow(caches *clusterview.Caches, revision clusterview.Revision, replicas int, s *strategy.Strategy) (bool, string) {
	counts := make([]int, len(s.Terms))
	placed := 0
	caches.EachPodOf(revision, func(p clusterview.PlacedPod) {
		if !p.HoldsSeat() || !p.Placed() {
			return
		}
		placed++
		if t := p.TermIn(s); t >= 0 {
			counts[t]++
		}
	})
	if placed != replicas {
		return false, fmt.Sprintf("%d of %d pods placed", placed, replicas)
	}
	for i, want := range s.Target(replicas) {
		if counts[i] != want {
			return false, fmt.Sprintf("term %d holds %d pods, its target is %d", i+1, counts[i], want)
		}
	}
	return true, ""
}
