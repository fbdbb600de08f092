package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/api/v1alpha1"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// Governable is a workload as the status writer counts it.
type Governable struct {
	Workload
	Name string
	// Shown is the kind reported when it is not Workload.Kind (a CronJob's Job is
	// selected as its CronJob but reported as the Job it is).
	Shown string
	// Own is set when the workload decides for itself: a strategy annotation on it or
	// its pod template, or UseCustomKubeScheduler "false". No policy governs it.
	Own bool
	// Exact tells whether the workload's live pods stand exactly on s's target, and if
	// not why (nil: not known, not counted either way).
	Exact func(s *strategy.Strategy) (exact bool, why string)
	// OutOfScope says why the API server does not send the workload's pods to the
	// webhook ("" when it does): a policy that selects it does not govern it.
	OutOfScope string
	// Moves counts the pods enforcing s would move (strategy.Moves; nil: not known).
	Moves func(s *strategy.Strategy) int
	// Waits says why its non-urgent moves wait now under the policy link (Timing.Waits:
	// a closed move window; nil or "": they do not).
	Waits func(link strategy.AnnotatedObject) string
}

func (g *Governable) shownKind() string {
	if g.Shown != "" {
		return g.Shown
	}
	return g.Kind
}

// Status is what a policy's status says.
type Status struct {
	Generation int64
	Workloads  int32
	// Exact counts the governed workloads that are exact; NotExact lists the first
	// MaxNotExact that are not.
	Exact    int32
	NotExact []v1alpha1.WorkloadState
	// Invalid is the parser's or the selector's message; "" when the policy is accepted.
	Invalid string
	// Conflicts names, per workload both match, the policies of the same scope and
	// priority this one won or lost against.
	Conflicts []string
	// OutOfScope names the workloads the policy selects that the webhook's scope leaves
	// out, and why (not counted in Workloads).
	OutOfScope []string
	// Unserved says, per term that nothing serves, which and the likely typo.
	Unserved []string
	// Audit: the policy is in audit mode; Workloads, Exact and NotExact count the
	// workloads it would govern, and WouldMove the pods enforcing it would move.
	Audit     bool
	WouldMove int32
	// Suspended: spec.suspend; Stopped says why every move of the loop is stopped ("":
	// it is not). Either way the loop moves none of its workloads' pods.
	Suspended bool
	Stopped   string
}

// Audited sums up what the sources in audit mode (policies and namespace defaults)
// would do: the workloads they would govern and the pods enforcing them would move.
type Audited struct {
	Workloads, WouldMove int
}

// Unserved tells whether nothing serves a term's labels, and the likely typo
// (karpenter.Catalog.Hint); nil: not known.
type Unserved func(labels map[string]string) (hint string, unserved bool)

// Statuses computes every policy's status over workloads, and what the sources in
// audit mode would do.
func Statuses(p *policies, workloads []Governable, namespace func(string) *Namespace, unserved Unserved) (map[*Compiled]*Status, Audited) {
	out := map[*Compiled]*Status{}
	var audited Audited
	get := func(c *Compiled) *Status {
		s := out[c]
		if s == nil {
			s = &Status{Generation: c.Generation, Audit: c.Audit, Suspended: c.Suspended}
			parsed, err := strategy.Parse(c.Link.Annotations[strategy.AnnotationStrategy])
			switch {
			case c.SelectorErr != nil:
				s.Invalid = c.SelectorErr.Error()
			case err != nil:
				s.Invalid = "spec.strategy: " + err.Error()
			case unserved != nil:
				s.Unserved = unservedTerms(parsed, unserved)
			}
			out[c] = s
		}
		return s
	}
	for _, c := range p.cluster {
		get(c)
	}
	for _, list := range p.namespaced {
		for _, c := range list {
			get(c)
		}
	}
	for _, w := range workloads {
		if w.Own {
			continue
		}
		ns := namespace(w.Namespace)
		m := p.match(w.Workload, ns, false)
		if m.Policy != nil {
			count(get, m, w)
		}
		// What the sources in audit mode would do: the policy, or failing one the
		// namespace default, that would govern w if they were all enforced.
		a := m
		if p.audited {
			a = p.match(w.Workload, ns, true)
		}
		switch {
		case a.Policy != nil && a.Policy.Audit:
			if st := count(get, a, w); st != nil && w.Moves != nil && st.Invalid == "" {
				if s, err := parsed(a.Policy); err == nil {
					n := w.Moves(s)
					st.WouldMove += int32(n)
					audited.Workloads++
					audited.WouldMove += n
				}
			}
		case a.Policy == nil && m.Policy == nil && ns != nil && ns.Audit && ns.Link.Name != "" && w.OutOfScope == "" && w.Moves != nil:
			if src := strategy.Resolve(ns.Link); src.Err == nil && src.Strategy != nil {
				audited.Workloads++
				audited.WouldMove += w.Moves(src.Strategy)
			}
		}
	}
	return out, audited
}

// count counts w in the status of m's policy, and the conflicts of m; it returns that
// status, nil when w is out of scope.
func count(get func(*Compiled) *Status, m Match, w Governable) *Status {
	st := get(m.Policy)
	if w.OutOfScope != "" {
		st.OutOfScope = append(st.OutOfScope, w.OutOfScope)
		return nil
	}
	st.Workloads++
	if w.Exact != nil && st.Invalid == "" {
		if s, err := parsed(m.Policy); err == nil {
			if ok, why := w.Exact(s); ok {
				st.Exact++
			} else if len(st.NotExact) < v1alpha1.MaxNotExact {
				if w.Waits != nil && strings.HasPrefix(why, string(strategy.StateOffTarget)) {
					if waits := w.Waits(m.Policy.Link); waits != "" {
						why += "; " + waits
					}
				}
				st.NotExact = append(st.NotExact, v1alpha1.WorkloadState{Kind: w.shownKind(), Namespace: w.Namespace, Name: w.Name, Reason: why})
			}
		}
	}
	ref := w.shownKind() + " " + w.Namespace + "/" + w.Name
	for _, other := range m.Conflicts {
		st.Conflicts = append(st.Conflicts, fmt.Sprintf("%s: also matched by %s (same priority; this one wins by name)", ref, other.Link.Name))
		get(other).Conflicts = append(get(other).Conflicts, fmt.Sprintf("%s: %s wins (same priority, first by name)", ref, m.Policy.Link.Name))
	}
	return st
}

// unservedTerms says, per term of s that nothing serves, which and the likely typo.
func unservedTerms(s *strategy.Strategy, unserved Unserved) []string {
	var out []string
	for i, t := range s.Terms {
		if hint, u := unserved(t.LabelMap()); u {
			out = append(out, strategy.UnservedReason(i, t, hint))
		}
	}
	return out
}

// parsed is the policy's strategy, parsed.
func parsed(c *Compiled) (*strategy.Strategy, error) {
	return strategy.Parse(c.Link.Annotations[strategy.AnnotationStrategy])
}

// maxConflictMessages bounds the conflicts a condition message lists.
const maxConflictMessages = 3

// firstOf joins the first maxConflictMessages of msgs, and says how many more there are.
func firstOf(msgs []string) string {
	shown := msgs[:min(len(msgs), maxConflictMessages)]
	msg := strings.Join(shown, "; ")
	if len(msgs) > len(shown) {
		msg += fmt.Sprintf("; and %d more", len(msgs)-len(shown))
	}
	return msg
}

// conditions turns a Status into the policy's conditions; transition times are kept
// from prev when a condition's status did not change.
func (s *Status) conditions(prev []metav1.Condition, now metav1.Time) []metav1.Condition {
	accepted := metav1.Condition{Type: v1alpha1.ConditionAccepted, Status: metav1.ConditionTrue, Reason: "Valid", Message: "the strategy parses", ObservedGeneration: s.Generation}
	if s.Invalid != "" {
		accepted.Status, accepted.Reason, accepted.Message = metav1.ConditionFalse, "Invalid", s.Invalid
	}
	conflicting := metav1.Condition{Type: v1alpha1.ConditionConflicting, Status: metav1.ConditionFalse, Reason: "NoConflict", Message: "no other policy of the same scope and priority matches its workloads", ObservedGeneration: s.Generation}
	if len(s.Conflicts) > 0 {
		conflicting.Status, conflicting.Reason, conflicting.Message = metav1.ConditionTrue, "SamePriority", firstOf(s.Conflicts)
	}
	inScope := metav1.Condition{Type: v1alpha1.ConditionInScope, Status: metav1.ConditionTrue, Reason: "InScope", Message: "every workload it selects is in the webhook's scope", ObservedGeneration: s.Generation}
	if len(s.OutOfScope) > 0 {
		inScope.Status, inScope.Reason, inScope.Message = metav1.ConditionFalse, "NamespaceNotEnabled", fmt.Sprintf("%d selected workloads are out of the webhook's scope and not governed: %s", len(s.OutOfScope), firstOf(s.OutOfScope))
	}
	governing := metav1.Condition{Type: v1alpha1.ConditionGoverning, Status: metav1.ConditionTrue, Reason: "Governing", Message: fmt.Sprintf("governs %d workloads", s.Workloads), ObservedGeneration: s.Generation}
	switch {
	case s.Workloads > 0 && s.Audit:
		governing.Reason = "Audit"
		governing.Message = fmt.Sprintf("audit: would govern %d workloads; enforcing it would move %d pods (it places and moves none while spec.mode is Audit)", s.Workloads, s.WouldMove)
	case s.Workloads > 0 && s.Stopped != "":
		governing.Reason = "MovesStopped"
		governing.Message = fmt.Sprintf("governs %d workloads; the loop moves none of their pods: %s", s.Workloads, s.Stopped)
	case s.Workloads > 0 && s.Suspended:
		governing.Reason = "Suspended"
		governing.Message = fmt.Sprintf("governs %d workloads and places their new pods; the loop moves none of their pods while spec.suspend is true", s.Workloads)
	case s.Workloads > 0:
	case len(s.OutOfScope) > 0:
		governing.Status, governing.Reason, governing.Message = metav1.ConditionFalse, "OutOfScope", "every workload it selects is out of the webhook's scope: "+firstOf(s.OutOfScope)
	default:
		governing.Status, governing.Reason, governing.Message = metav1.ConditionFalse, "SelectsNothing", "its selector, kinds and namespaces match no workload without a strategy of its own: check spec.selector for a typo"
	}
	served := metav1.Condition{Type: v1alpha1.ConditionServed, Status: metav1.ConditionTrue, Reason: "Served", Message: "every term is served by a NodePool, node group or node", ObservedGeneration: s.Generation}
	if len(s.Unserved) > 0 {
		served.Status, served.Reason, served.Message = metav1.ConditionFalse, "TermUnserved", firstOf(s.Unserved)
	}
	out := []metav1.Condition{accepted, conflicting, inScope, governing, served}
	ready := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Ready", Message: "accepted, governing, in scope and served", ObservedGeneration: s.Generation}
	for _, c := range []metav1.Condition{accepted, served, governing, inScope} {
		if c.Status == metav1.ConditionFalse {
			ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, c.Reason, c.Message
			break
		}
	}
	out = append(out, ready)
	for i := range out {
		out[i].LastTransitionTime = now
		for _, p := range prev {
			if p.Type == out[i].Type && p.Status == out[i].Status {
				out[i].LastTransitionTime = p.LastTransitionTime
			}
		}
	}
	return out
}

// StatusWriter writes each policy's status (observedGeneration, Accepted, Conflicting,
// workloads) from the caches. Run it on the elected replica only: it writes at most
// once per Every, and only the policies whose status changed.
type StatusWriter struct {
	Cache *Cache
	Dyn   dynamic.Interface
	// Workloads lists the workloads (from the webhook's caches).
	Workloads func() []Governable
	// Unserved tells which terms nothing serves (nil: not said).
	Unserved Unserved
	// Stopped says why every move of the loop is stopped ("": it is not; nil: not said).
	Stopped func() string
	// Audited, when set, is told after each round what the sources in audit mode
	// would do (the metrics).
	Audited func(Audited)
	// Every is the time between two rounds of writes (default 30s), for the workloads'
	// changes.
	Every time.Duration
	// Changes, when set, wakes a round about a second after a policy or a namespace
	// changed (Cache.OnChange): a user applying a policy reads its conditions within
	// seconds, and a burst of changes makes one round.
	Changes <-chan struct{}
	Log     logrus.FieldLogger
}

// policyKey is one policy object. The UID tells a policy from one deleted before it
// under the same name: the new object has no status yet, even when the status computed
// for it equals the one written for the old.
type policyKey struct {
	namespace, name string
	uid             types.UID
}

// Run writes statuses until ctx ends.
func (w *StatusWriter) Run(ctx context.Context) {
	every := w.Every
	if every <= 0 {
		every = 30 * time.Second
	}
	written := map[policyKey]string{}
	prevConditions := map[policyKey][]metav1.Condition{}
	for {
		w.round(ctx, written, prevConditions)
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		case <-w.Changes:
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}
}

// round writes the statuses that changed since the last round.
func (w *StatusWriter) round(ctx context.Context, written map[policyKey]string, prevConditions map[policyKey][]metav1.Condition) {
	if w.Cache == nil || w.Cache.namespaced == nil {
		return
	}
	if !cache.WaitForCacheSync(ctx.Done(), w.Cache.namespaced.HasSynced, w.Cache.cluster.HasSynced, w.Cache.namespaces.HasSynced) {
		return
	}
	now := metav1.Now()
	statuses, audited := Statuses(w.Cache.view.Load(), w.Workloads(), w.Cache.namespace, w.Unserved)
	stopped := ""
	if w.Stopped != nil {
		stopped = w.Stopped()
	}
	if w.Audited != nil {
		w.Audited(audited)
	}
	keys := make([]*Compiled, 0, len(statuses))
	for c := range statuses {
		keys = append(keys, c)
	}
	slices.SortFunc(keys, func(a, b *Compiled) int { return strings.Compare(a.Link.Name, b.Link.Name) })
	for _, c := range keys {
		s := statuses[c]
		if !s.Audit {
			s.Stopped = stopped
		}
		key := policyKey{c.Namespace, c.Name, c.UID}
		sum := fmt.Sprintf("%d|%d|%d|%v|%s|%s|%s|%s|%v|%d|%v|%s", s.Generation, s.Workloads, s.Exact, s.NotExact, s.Invalid, strings.Join(s.Conflicts, "\n"), strings.Join(s.OutOfScope, "\n"), strings.Join(s.Unserved, "\n"), s.Audit, s.WouldMove, s.Suspended, s.Stopped)
		if written[key] == sum {
			continue
		}
		conds := s.conditions(prevConditions[key], now)
		status := map[string]any{
			"observedGeneration": s.Generation, "workloads": s.Workloads, "conditions": conds,
			"exact": s.Exact, "notExact": s.NotExact, "wouldMove": nil, // a merge patch's null removes it
		}
		if s.Audit {
			status["wouldMove"] = s.WouldMove
		}
		body, err := json.Marshal(map[string]any{"status": status})
		if err != nil {
			continue
		}
		res := w.Dyn.Resource(v1alpha1.ClusterPlacementPolicies)
		var ri dynamic.ResourceInterface = res
		if !c.Cluster() {
			ri = w.Dyn.Resource(v1alpha1.PlacementPolicies).Namespace(c.Namespace)
		}
		if _, err := ri.Patch(ctx, c.Name, types.MergePatchType, body, metav1.PatchOptions{}, "status"); err != nil {
			w.Log.WithError(err).WithField("policy", c.Link.Name).Warn("cannot write the policy's status")
			continue
		}
		written[key], prevConditions[key] = sum, conds
	}
	// Forget deleted policies: their memory would grow with every policy ever seen.
	live := make(map[policyKey]bool, len(keys))
	for _, c := range keys {
		live[policyKey{c.Namespace, c.Name, c.UID}] = true
	}
	for key := range written {
		if !live[key] {
			delete(written, key)
			delete(prevConditions, key)
		}
	}
}
