package main

import (
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/policy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// governable lists the workloads a policy may govern from the webhook's caches:
// Deployments, Argo Rollouts (when watched), StatefulSets, bare ReplicaSets and running
// Jobs, each
// marked Own when it decides its strategy itself (an annotation on it or its pod
// template, or the opt-out).
func governable(caches *clusterview.Caches, skip func(namespace string) bool, scope *clusterview.Scope, terms termFacts, timing strategy.Timing) func() []policy.Governable {
	return func() []policy.Governable {
		var out []policy.Governable
		// revision returns the revision whose pods are counted, or why there is none; pw
		// is what policies select on; more are annotations of the workload's own after
		// its own (a CronJob's, for its Job).
		addAs := func(kind string, pw policy.Workload, meta metav1.ObjectMeta, template map[string]string, revision func() (types.UID, int, string), more ...strategy.AnnotatedObject) {
			if skip(meta.Namespace) {
				return
			}
			src := strategy.Find(append([]strategy.AnnotatedObject{{Annotations: template}, {Annotations: meta.Annotations}}, more...)...)
			g := policy.Governable{Workload: pw, Name: meta.Name, Shown: kind, Own: src.Present || src.Disabled}
			if !scope.CoversNamespace(meta.Namespace) {
				g.OutOfScope = scope.WhyNot(meta.Namespace, kind+" "+meta.Namespace+"/"+meta.Name)
			}
			if !g.Own {
				g.Exact = func(s *strategy.Strategy) (bool, string) {
					uid, replicas, why := revision()
					if why != "" {
						return false, why
					}
					return exactNow(caches, clusterview.Revision{Namespace: meta.Namespace, UID: uid}, replicas, s, terms)
				}
				g.Waits = func(link strategy.AnnotatedObject) string {
					chain := []strategy.AnnotatedObject{{Name: "pod template", Annotations: template}, {Name: kind + " " + meta.Namespace + "/" + meta.Name, Annotations: meta.Annotations}, link}
					return strategy.TimingOf(chain, link.Name, timing).Waits(time.Now())
				}
				g.Moves = func(s *strategy.Strategy) int {
					uid, replicas, why := revision()
					if why != "" {
						return 0
					}
					return movesNow(caches, clusterview.Revision{Namespace: meta.Namespace, UID: uid}, replicas, s)
				}
			}
			out = append(out, g)
		}
		add := func(kind string, meta metav1.ObjectMeta, template map[string]string, revision func() (types.UID, int, string)) {
			addAs(kind, policy.Workload{Namespace: meta.Namespace, Kind: kind, Labels: meta.Labels}, meta, template, revision)
		}
		r := caches.Resolver
		if deployments, err := r.Deployments.List(labels.Everything()); err == nil {
			for _, d := range deployments {
				add("Deployment", d.ObjectMeta, d.Spec.Template.Annotations, func() (types.UID, int, string) {
					for _, rs := range caches.ReplicaSetsOf(d.UID) {
						if rs.Namespace == d.Namespace && rs.Annotations[deploymentRevision] == d.Annotations[deploymentRevision] {
							return rs.UID, replicasOf(d.Spec.Replicas), ""
						}
					}
					return "", 0, noRevision
				})
			}
		}
		if sets, err := r.StatefulSets.List(labels.Everything()); err == nil {
			for _, s := range sets {
				add("StatefulSet", s.ObjectMeta, s.Spec.Template.Annotations, func() (types.UID, int, string) { return s.UID, replicasOf(s.Spec.Replicas), "" })
			}
		}
		for _, ro := range caches.Rollouts() {
			current, why := rolloutRevision(caches.ReplicaSetsOf(ro.UID), ro.Namespace)
			var template map[string]string
			if current != nil {
				template = current.Spec.Template.Annotations
			}
			add("Rollout", ro.ObjectMeta, template, func() (types.UID, int, string) {
				if current == nil {
					return "", 0, why
				}
				return current.UID, replicasOf(current.Spec.Replicas), ""
			})
		}
		if sets, err := r.ReplicaSets.List(labels.Everything()); err == nil {
			for _, rs := range sets {
				if metav1.GetControllerOfNoCopy(rs) == nil {
					add("ReplicaSet", rs.ObjectMeta, rs.Spec.Template.Annotations, func() (types.UID, int, string) { return rs.UID, replicasOf(rs.Spec.Replicas), "" })
				}
			}
		}
		if r.Jobs != nil && r.CronJobs != nil {
			if jobs, err := r.Jobs.List(labels.Everything()); err == nil {
				for _, j := range jobs {
					if clusterview.JobFinished(j) {
						continue // holds no seat; a CronJob every minute leaves many
					}
					pw := policy.Workload{Namespace: j.Namespace, Kind: "Job", Labels: j.Labels}
					var more []strategy.AnnotatedObject
					if ref := metav1.GetControllerOfNoCopy(j); ref != nil && ref.Kind == "CronJob" {
						if cj, err := r.CronJobs.CronJobs(j.Namespace).Get(ref.Name); err == nil && cj.UID == ref.UID {
							pw.Kind, pw.Labels = "CronJob", cj.Labels
							more = append(more, strategy.AnnotatedObject{Annotations: cj.Annotations})
						}
					}
					addAs("Job", pw, j.ObjectMeta, j.Spec.Template.Annotations, func() (types.UID, int, string) { return j.UID, max(0, clusterview.JobReplicas(j)), "" }, more...)
				}
			}
		}
		return out
	}
}

// rolloutRevision is the one ReplicaSet of namespace ns among a Rollout's sets that has
// replicas: the revision its exact count is read from. None while a canary or a
// blue-green preview runs two (why says so) or before the first has replicas.
func rolloutRevision(sets []*appsv1.ReplicaSet, ns string) (current *appsv1.ReplicaSet, why string) {
	for _, rs := range sets {
		if rs.Namespace != ns || rs.Spec.Replicas == nil || *rs.Spec.Replicas == 0 {
			continue
		}
		if current != nil {
			return nil, "the Rollout is moving pods between its ReplicaSets"
		}
		current = rs
	}
	if current == nil {
		return nil, noRevision
	}
	return current, ""
}

// noRevision is why a workload is not exact before its first revision has pods.
const noRevision = "no current revision yet"

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

// termFacts is what the policy status knows of a revision's terms beside its pods: the
// convergence loop's records of unavailable terms and what serves a term (nil: unknown).
type termFacts struct {
	unavailable func(revision types.UID) map[int]string
	unserved    policy.Unserved
}

// exactNow judges the live placed pods of revision against s for replicas pods
// (strategy.Judge, as spread does), and says why when they are not exact.
func exactNow(caches *clusterview.Caches, revision clusterview.Revision, replicas int, s *strategy.Strategy, terms termFacts) (bool, string) {
	t := strategy.Tally{Replicas: replicas, Placed: make([]int, len(s.Terms))}
	caches.EachPodOf(revision, func(p clusterview.PlacedPod) {
		if !p.HoldsSeat() {
			return
		}
		if !p.Placed() {
			t.Unplaced++
			return
		}
		if i := p.TermIn(s); i >= 0 {
			t.Placed[i]++
		}
	})
	var c strategy.Conditions
	if terms.unavailable != nil {
		unavailable := terms.unavailable(revision.UID)
		c.Unavailable = func(i int) (string, bool) { why, ok := unavailable[i]; return why, ok }
	}
	if terms.unserved != nil {
		c.Unserved = func(i int) (string, bool) { return terms.unserved(s.Terms[i].LabelMap()) }
	}
	v := strategy.Judge(s, t, c)
	if v.Exact() {
		return true, ""
	}
	return false, string(v.State) + ": " + v.Why
}

// movesNow counts the pods of revision that enforcing s would move (strategy.Moves):
// its placed pods off s's target, and the seats no placed pod holds, less the pods
// that carry karpenter.sh/do-not-disrupt.
func movesNow(caches *clusterview.Caches, revision clusterview.Revision, replicas int, s *strategy.Strategy) int {
	var pods []strategy.SeatTerm
	caches.EachPodOf(revision, func(p clusterview.PlacedPod) {
		if p.HoldsSeat() && (p.Placed() || p.DoNotDisrupt) {
			pods = append(pods, strategy.SeatTerm{Seat: p.Seat, Term: p.TermIn(s), Stays: p.DoNotDisrupt})
		}
	})
	return strategy.Moves(s, replicas, pods)
}
