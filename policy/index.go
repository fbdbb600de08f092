package policy

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"sigs.k8s.io/yaml"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/api/v1alpha1"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// Workload is what a policy selects on: the workload users see (a Deployment, a
// StatefulSet, a bare ReplicaSet, a Rollout, a Job, a CronJob for its Jobs), not its
// ReplicaSets or pods.
type Workload struct {
	Namespace string
	// Kind is Deployment, StatefulSet, ReplicaSet, Rollout, Job or CronJob (a CronJob's
	// Job, with the CronJob's labels).
	Kind string
	// Labels are the workload's own metadata.labels.
	Labels map[string]string
}

// Compiled is a policy ready to match: its selectors parsed and its link built once, when
// the policy is listed or changes, so a lookup only reads.
type Compiled struct {
	// Link names the policy for messages ("PlacementPolicy shop/web-split") and carries
	// its strategy under the annotation key, as a workload would.
	Link strategy.AnnotatedObject
	// Namespace is "" for a ClusterPlacementPolicy.
	Namespace, Name string
	// UID tells a policy from one deleted before it under the same name (its status
	// writer remembers what it wrote per object, not per name).
	UID      types.UID
	Priority int32
	// Generation is the policy's metadata.generation (for its status).
	Generation int64
	// Audit: spec.mode is Audit. The policy governs nothing (admission, the loop, plan
	// and spread resolve past it) but is reported as if it did.
	Audit bool
	// Suspended: spec.suspend. Its link carries the converge "false" annotation, so the
	// loop moves none of its workloads' pods, as for a workload that opted out.
	Suspended  bool
	kinds      kindSet
	selector   labels.Selector // nil: matches nothing (SelectorErr says why)
	namespaces labels.Selector // cluster policies; nil: every namespace
	// SelectorErr is why a selector does not parse; such a policy matches nothing.
	SelectorErr error
}

// kindSet is a set of workload kinds as bits; 0 selects every kind.
type kindSet uint8

func kindBit(kind string) kindSet {
	switch kind {
	case string(v1alpha1.KindDeployment):
		return 1
	case string(v1alpha1.KindStatefulSet):
		return 2
	case string(v1alpha1.KindReplicaSet):
		return 4
	case string(v1alpha1.KindRollout):
		return 8
	case string(v1alpha1.KindJob):
		return 16
	case string(v1alpha1.KindCronJob):
		return 32
	}
	return 0
}

// selectingBits are the kinds of which a policy needs one to select a workload of
// kind: a CronJob's Jobs are Jobs too, so "Job" selects them as well as "CronJob".
func selectingBits(kind string) kindSet {
	if kind == string(v1alpha1.KindCronJob) {
		return kindBit(kind) | kindBit(string(v1alpha1.KindJob))
	}
	return kindBit(kind)
}

// Cluster reports whether c is a ClusterPlacementPolicy.
func (c *Compiled) Cluster() bool { return c.Namespace == "" }

// SelectsNamespace reports whether c may govern workloads of a namespace with nsLabels:
// its namespaceSelector (a cluster policy) matches them.
func (c *Compiled) SelectsNamespace(nsLabels map[string]string) bool {
	return c.namespaces == nil || c.namespaces.Matches(labels.Set(nsLabels))
}

// matches reports whether c governs w, given the labels of w's namespace.
func (c *Compiled) matches(w Workload, nsLabels map[string]string) bool {
	if c.selector == nil {
		return false
	}
	if c.kinds != 0 && c.kinds&selectingBits(w.Kind) == 0 {
		return false
	}
	if c.namespaces != nil && !c.namespaces.Matches(labels.Set(nsLabels)) {
		return false
	}
	return c.selector.Matches(labels.Set(w.Labels))
}

// compile builds a Compiled from a policy's metadata and spec.
func compile(kind string, meta metav1.ObjectMeta, spec v1alpha1.PlacementPolicySpec, nsSelector *metav1.LabelSelector) *Compiled {
	c := &Compiled{Namespace: meta.Namespace, Name: meta.Name, UID: meta.UID, Priority: spec.Priority, Generation: meta.Generation, Audit: spec.Audit()}
	name := kind + " " + meta.Name
	if meta.Namespace != "" {
		name = kind + " " + meta.Namespace + "/" + meta.Name
	}
	c.Link = strategy.AnnotatedObject{Name: name, Annotations: map[string]string{strategy.AnnotationStrategy: spec.Strategy}, Origin: strategy.Origin(kind)}
	if spec.Suspend {
		c.Suspended = true
		c.Link.Annotations[strategy.AnnotationConverge] = "false"
	}
	if w := spec.MoveWindow; w != nil {
		// As the annotation says it, so that the most specific link wins (strategy.TimingOf).
		c.Link.Annotations[strategy.AnnotationMoveWindow] = (&strategy.Window{Schedule: w.Schedule, Duration: w.Duration.Duration,
			TimeZone: w.TimeZone, MaxMoves: int(w.MaxMoves)}).String()
	}
	if spec.MoveJobPods {
		c.Link.Annotations[strategy.AnnotationMoveJobPods] = "true"
	}
	if spec.MinFallbackStay != nil {
		c.Link.Annotations[strategy.AnnotationMinFallbackStay] = spec.MinFallbackStay.Duration.String()
	}
	for _, k := range spec.Kinds {
		bit := kindBit(string(k))
		if bit == 0 {
			c.SelectorErr = fmt.Errorf("spec.kinds: %q is not Deployment, StatefulSet, ReplicaSet, Rollout, Job or CronJob", k)
			return c
		}
		c.kinds |= bit
	}
	sel, err := selectorOf(spec.Selector)
	if err != nil {
		c.SelectorErr = fmt.Errorf("spec.selector: %w", err)
		return c
	}
	if nsSelector != nil {
		ns, err := metav1.LabelSelectorAsSelector(nsSelector)
		if err != nil {
			c.SelectorErr = fmt.Errorf("spec.namespaceSelector: %w", err)
			return c
		}
		c.namespaces = ns
	}
	c.selector = sel
	return c
}

// selectorOf is a workload selector; absent or empty selects everything.
func selectorOf(s *metav1.LabelSelector) (labels.Selector, error) {
	if s == nil {
		return labels.Everything(), nil
	}
	return metav1.LabelSelectorAsSelector(s)
}

// CompileNamespaced compiles a PlacementPolicy.
func CompileNamespaced(p *v1alpha1.PlacementPolicy) *Compiled {
	return compile(v1alpha1.KindPlacementPolicy, p.ObjectMeta, p.Spec, nil)
}

// CompileCluster compiles a ClusterPlacementPolicy.
func CompileCluster(p *v1alpha1.ClusterPlacementPolicy) *Compiled {
	meta := p.ObjectMeta
	meta.Namespace = "" // cluster scoped, whatever the object says
	return compile(v1alpha1.KindClusterPlacementPolicy, meta, p.Spec.PlacementPolicySpec, p.Spec.NamespaceSelector)
}

// Namespace is what a lookup needs of a namespace: its labels (cluster policies'
// namespaceSelector) and its default strategy, as a link.
type Namespace struct {
	Labels map[string]string
	// Link is set (Link.Name != "") when the namespace carries a strategy annotation.
	Link strategy.AnnotatedObject
	// Audit: the namespace's mode annotation says Audit, so its default is reported,
	// never applied.
	Audit bool
	// MovesOff: the namespace's converge annotation is "false": the loop moves no pod
	// of its workloads (on the webhook's own namespace: no pod anywhere).
	MovesOff bool
}

// NamespaceOf keeps what a lookup needs of ns. Only the strategy annotations go into its
// link: UseCustomKubeScheduler on a namespace is not a switch (a workload opts out).
func NamespaceOf(ns *corev1.Namespace) *Namespace {
	out := &Namespace{Labels: ns.Labels, Audit: strings.EqualFold(strings.TrimSpace(ns.Annotations[v1alpha1.AnnotationMode]), string(v1alpha1.ModeAudit)),
		MovesOff: strings.EqualFold(strings.TrimSpace(ns.Annotations[strategy.AnnotationConverge]), "false")}
	for _, k := range []string{strategy.AnnotationStrategy, strategy.AnnotationStrategyAlias} {
		if v, ok := ns.Annotations[k]; ok {
			if out.Link.Annotations == nil {
				out.Link = strategy.AnnotatedObject{Name: "Namespace " + ns.Name, Annotations: map[string]string{}, Origin: strategy.OriginNamespace}
			}
			out.Link.Annotations[k] = v
		}
	}
	return out
}

// policies is an immutable set of compiled policies: namespaced ones by namespace and
// cluster ones, each list in precedence order (higher priority first, then name).
type policies struct {
	namespaced map[string][]*Compiled
	cluster    []*Compiled
	// audited: some policy is in audit mode (otherwise a match as if every policy were
	// enforced is the plain match).
	audited bool
}

func byPrecedence(a, b *Compiled) int {
	if c := cmp.Compare(b.Priority, a.Priority); c != 0 {
		return c
	}
	return cmp.Compare(a.Name, b.Name)
}

func newPolicies(all []*Compiled) *policies {
	p := &policies{namespaced: map[string][]*Compiled{}}
	for _, c := range all {
		p.audited = p.audited || c.Audit
		if c.Cluster() {
			p.cluster = append(p.cluster, c)
		} else {
			p.namespaced[c.Namespace] = append(p.namespaced[c.Namespace], c)
		}
	}
	slices.SortFunc(p.cluster, byPrecedence)
	for _, list := range p.namespaced {
		slices.SortFunc(list, byPrecedence)
	}
	return p
}

// Match is the whole answer for a workload: the governing policy, the policies of the
// same scope and priority it won against by name (a conflict its status reports), and
// the namespace default.
type Match struct {
	Policy *Compiled
	// Conflicts are the other matching policies of Policy's scope and priority.
	Conflicts []*Compiled
	Namespace *Namespace
}

// match finds the policy that governs w: policies in audit mode are passed over unless
// audit is set (the answer as if every policy were enforced).
func (p *policies) match(w Workload, ns *Namespace, audit bool) Match {
	m := Match{Namespace: ns}
	var nsLabels map[string]string
	if ns != nil {
		nsLabels = ns.Labels
	}
	for _, list := range [][]*Compiled{p.namespaced[w.Namespace], p.cluster} {
		for _, c := range list {
			if (c.Audit && !audit) || !c.matches(w, nsLabels) {
				continue
			}
			if m.Policy == nil {
				m.Policy = c
			} else if c.Priority == m.Policy.Priority {
				m.Conflicts = append(m.Conflicts, c)
			}
		}
		if m.Policy != nil {
			break
		}
	}
	return m
}

// winner is match's Policy without the conflicts: a lookup on every admission, it
// allocates nothing.
func (p *policies) winner(w Workload, ns *Namespace, audit bool) *Compiled {
	var nsLabels map[string]string
	if ns != nil {
		nsLabels = ns.Labels
	}
	for _, list := range [][]*Compiled{p.namespaced[w.Namespace], p.cluster} {
		for _, c := range list {
			if (!c.Audit || audit) && c.matches(w, nsLabels) {
				return c
			}
		}
	}
	return nil
}

// appendLinks appends the links after w's own chain: its policy, then its namespace's
// default. Sources in audit mode are left out unless audit is set.
func appendLinks(dst []strategy.AnnotatedObject, p *policies, w Workload, ns *Namespace, audit bool) []strategy.AnnotatedObject {
	if c := p.winner(w, ns, audit); c != nil {
		dst = append(dst, c.Link)
	}
	if ns != nil && ns.Link.Name != "" && (audit || !ns.Audit) {
		dst = append(dst, ns.Link)
	}
	return dst
}

// Index answers lookups over a fixed set of policies and namespaces.
type Index struct {
	p          *policies
	namespaces map[string]*Namespace
}

// NewIndex builds an Index over listed policies and namespaces.
func NewIndex(namespaced []v1alpha1.PlacementPolicy, cluster []v1alpha1.ClusterPlacementPolicy, namespaces []corev1.Namespace) *Index {
	var all []*Compiled
	for i := range namespaced {
		all = append(all, CompileNamespaced(&namespaced[i]))
	}
	for i := range cluster {
		all = append(all, CompileCluster(&cluster[i]))
	}
	idx := &Index{p: newPolicies(all), namespaces: make(map[string]*Namespace, len(namespaces))}
	for i := range namespaces {
		idx.namespaces[namespaces[i].Name] = NamespaceOf(&namespaces[i])
	}
	return idx
}

// AppendLinks appends to dst the links that follow w's own annotations: the policy that
// governs it, then its namespace's default. A nil Index appends nothing.
func (x *Index) AppendLinks(dst []strategy.AnnotatedObject, w Workload) []strategy.AnnotatedObject {
	if x == nil {
		return dst
	}
	return appendLinks(dst, x.p, w, x.namespaces[w.Namespace], false)
}

// AppendAuditLinks is AppendLinks as if every policy and namespace default in audit
// mode were enforced: what a reader resolves to say what they would do.
func (x *Index) AppendAuditLinks(dst []strategy.AnnotatedObject, w Workload) []strategy.AnnotatedObject {
	if x == nil {
		return dst
	}
	return appendLinks(dst, x.p, w, x.namespaces[w.Namespace], true)
}

// Match tells which policy governs w and which it won against.
func (x *Index) Match(w Workload) Match {
	if x == nil {
		return Match{}
	}
	return x.p.match(w, x.namespaces[w.Namespace], false)
}

// MovesOff reports whether namespace ns is annotated converge "false" (Stopped).
func (x *Index) MovesOff(ns string) bool {
	if x == nil {
		return false
	}
	n := x.namespaces[ns]
	return n != nil && n.MovesOff
}

// Stopped is the loop's stop switch as every reader reads it: the converge annotation
// "false" on the webhook's namespace stops every move, on another namespace that
// namespace's. It returns why moves in namespace ns (with "": anywhere) are stopped, ""
// when they are not. An annotation the loop watches, not a setting: during an incident
// it takes effect within seconds, with no rollout of the webhook.
func Stopped(movesOff func(ns string) bool, webhookNamespace string) func(ns string) string {
	return func(ns string) string {
		switch {
		case movesOff(webhookNamespace):
			return fmt.Sprintf("every move of the convergence loop is stopped: namespace %s is annotated %s=false", webhookNamespace, strategy.AnnotationConverge)
		case ns != "" && movesOff(ns):
			return fmt.Sprintf("moves in namespace %s are stopped: it is annotated %s=false", ns, strategy.AnnotationConverge)
		}
		return ""
	}
}

// WithPolicy is a copy of x in which c replaces the policy of its scope and name, or
// joins the others: the policies as they would be once c is applied (the what-if of
// `plan --cluster -f policy.yaml`). x is not changed.
func (x *Index) WithPolicy(c *Compiled) *Index {
	var all []*Compiled
	if x != nil {
		for _, list := range x.p.namespaced {
			all = append(all, list...)
		}
		all = append(all, x.p.cluster...)
	}
	all = slices.DeleteFunc(all, func(o *Compiled) bool { return o.Namespace == c.Namespace && o.Name == c.Name })
	out := &Index{p: newPolicies(append(all, c)), namespaces: map[string]*Namespace{}}
	if x != nil {
		out.namespaces = x.namespaces
	}
	return out
}

// WithNamespace is a copy of x in which ns replaces the namespace of its name: its
// default, mode and labels as they would be once ns is applied. x is not changed.
func (x *Index) WithNamespace(ns *corev1.Namespace) *Index {
	out := &Index{p: newPolicies(nil), namespaces: map[string]*Namespace{}}
	if x != nil {
		out.p, out.namespaces = x.p, maps.Clone(x.namespaces)
	}
	out.namespaces[ns.Name] = NamespaceOf(ns)
	return out
}

// CompileDocument compiles one PlacementPolicy or ClusterPlacementPolicy manifest
// document (YAML or JSON; false for other kinds); a namespaced policy without a
// namespace is put in defaultNamespace, as kubectl apply would.
func CompileDocument(head metav1.TypeMeta, doc []byte, defaultNamespace string) (*Compiled, bool, error) {
	if head.APIVersion != v1alpha1.GroupVersion.String() {
		return nil, false, nil
	}
	switch head.Kind {
	case v1alpha1.KindPlacementPolicy:
		var p v1alpha1.PlacementPolicy
		if err := yaml.Unmarshal(doc, &p); err != nil {
			return nil, false, fmt.Errorf("decode %s: %w", head.Kind, err)
		}
		if p.Namespace == "" {
			p.Namespace = defaultNamespace
		}
		return CompileNamespaced(&p), true, nil
	case v1alpha1.KindClusterPlacementPolicy:
		var p v1alpha1.ClusterPlacementPolicy
		if err := yaml.Unmarshal(doc, &p); err != nil {
			return nil, false, fmt.Errorf("decode %s: %w", head.Kind, err)
		}
		return CompileCluster(&p), true, nil
	}
	return nil, false, nil
}
