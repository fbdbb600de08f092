package clusterview

import (
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/policy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// Governable lists the workloads a policy may govern from the caches, for the
// policies' status (Views: Deployments, Argo Rollouts when watched, StatefulSets, bare
// ReplicaSets and running Jobs), each marked Own when it decides its strategy itself
// (an annotation on it or its pod template, or the opt-out). timing is the cluster's
// move window and minimum stay, which a policy or the workload may override.
func (c *Caches) Governable(skip func(namespace string) bool, scope *Scope, terms TermFacts, timing strategy.Timing) func() []policy.Governable {
	return func() []policy.Governable {
		objs, err := c.Objects(skip)
		if err != nil {
			return nil
		}
		var out []policy.Governable
		// add appends the workload named name whose strategy chain is links (its own
		// first), counted on revision for replicas pods unless why says it is not.
		add := func(g policy.Governable, name string, links []strategy.AnnotatedObject, revision Revision, replicas int, why string) {
			src := strategy.Find(links...)
			g.Own = src.Present || src.Disabled
			if !scope.CoversNamespace(revision.Namespace) {
				g.OutOfScope = scope.WhyNot(revision.Namespace, name)
			}
			if !g.Own {
				g.Exact = func(s *strategy.Strategy) (bool, string) {
					if why != "" {
						return false, why
					}
					return c.exactNow(revision, replicas, s, terms)
				}
				g.Waits = func(link strategy.AnnotatedObject) string {
					return strategy.TimingOf(append(slices.Clip(links), link), link.Name, timing).Waits(time.Now())
				}
				g.Moves = func(s *strategy.Strategy) int {
					if why != "" {
						return 0
					}
					return c.movesNow(revision, replicas, s)
				}
			}
			out = append(out, g)
		}
		for _, v := range Views(objs) {
			g := policy.Governable{Workload: v.Policy(), Name: v.Meta.Name, Shown: v.Kind}
			add(g, v.Name(), v.Links(), Revision{Namespace: v.Meta.Namespace, UID: v.Revision}, replicasOf(v.Replicas), notCounted(&v))
		}
		return out
	}
}

// notCounted says why the pods of v's revision are not judged now ("": they are): it
// has none yet, or it is a Rollout moving pods between its ReplicaSets (each holds
// seats of its own, none the Rollout's replicas).
func notCounted(v *WorkloadView) string {
	switch {
	case v.Kind == "Rollout" && v.Rolling:
		return "the Rollout is moving pods between its ReplicaSets"
	case v.Revision == "" || v.Kind == "Rollout" && replicasOf(v.Replicas) == 0:
		return noRevision
	}
	return ""
}

// noRevision is why a workload is not exact before its first revision has pods.
const noRevision = "no current revision yet"

// replicasOf is spec.replicas, 1 when unset (the API server's default).
func replicasOf(r *int32) int {
	if r == nil {
		return 1
	}
	return int(*r)
}

// TermFacts is what the policy status knows of a revision's terms beside its pods: the
// convergence loop's records of unavailable terms and what serves a term (nil: unknown).
type TermFacts struct {
	Unavailable func(revision types.UID) map[int]string
	Unserved    policy.Unserved
}

// exactNow judges the live placed pods of revision against s for replicas pods
// (strategy.Judge, as spread does), and says why when they are not exact.
func (c *Caches) exactNow(revision Revision, replicas int, s *strategy.Strategy, terms TermFacts) (bool, string) {
	var cond strategy.Conditions
	if terms.Unavailable != nil {
		unavailable := terms.Unavailable(revision.UID)
		cond.Unavailable = func(i int) (string, bool) { why, ok := unavailable[i]; return why, ok }
	}
	if terms.Unserved != nil {
		cond.Unserved = func(i int) (string, bool) { return terms.Unserved(s.Terms[i].LabelMap()) }
	}
	v := Judge(s, replicas, func(fn func(PlacedPod)) { c.EachPodOf(revision, fn) }, cond)
	if v.Exact() {
		return true, ""
	}
	return false, string(v.State) + ": " + v.Why
}

// movesNow counts the pods of revision that enforcing s would move (strategy.Moves):
// its placed pods off s's target, and the seats no placed pod holds, less the pods
// that carry karpenter.sh/do-not-disrupt.
func (c *Caches) movesNow(revision Revision, replicas int, s *strategy.Strategy) int {
	var pods []strategy.SeatTerm
	c.EachPodOf(revision, func(p PlacedPod) {
		if p.HoldsSeat() && (p.Placed() || p.DoNotDisrupt) {
			pods = append(pods, strategy.SeatTerm{Seat: p.Seat, Term: p.TermIn(s), Stays: p.DoNotDisrupt})
		}
	})
	return strategy.Moves(s, replicas, pods)
}
