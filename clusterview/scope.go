package clusterview

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// PodWebhookName is the name of the pod webhook entry the chart and the local
// registration write; with scope opt-in a second entry carries a prefix
// ("original-label.") for the original project's namespace label.
const PodWebhookName = "pods.custom-kube-scheduler-webhook.io"

// IsPodWebhook reports whether a webhook entry's name is the pod entry's, prefixed or not.
func IsPodWebhook(name string) bool {
	return name == PodWebhookName || strings.HasSuffix(name, "."+PodWebhookName)
}

// ScopeRules are the call filters of the pod webhook entries: the API server sends a pod
// to the webhook when one entry's namespaceSelector matches its namespace's labels and
// its objectSelector the pod's labels. The matchConditions are not evaluated (CEL): the
// chart's only leave out pods the webhook would admit unchanged.
type ScopeRules struct {
	entries []scopeEntry
}

type scopeEntry struct {
	namespaces, objects labels.Selector
}

// ScopeRulesOf reads the pod webhook entries of configs.
func ScopeRulesOf(configs ...*admissionregistrationv1.MutatingWebhookConfiguration) (ScopeRules, error) {
	var r ScopeRules
	for _, c := range configs {
		for _, w := range c.Webhooks {
			if !IsPodWebhook(w.Name) {
				continue
			}
			e := scopeEntry{namespaces: labels.Everything(), objects: labels.Everything()}
			var err error
			if w.NamespaceSelector != nil {
				if e.namespaces, err = metav1.LabelSelectorAsSelector(w.NamespaceSelector); err != nil {
					return ScopeRules{}, fmt.Errorf("MutatingWebhookConfiguration %s, webhook %s: namespaceSelector: %w", c.Name, w.Name, err)
				}
			}
			if w.ObjectSelector != nil {
				if e.objects, err = metav1.LabelSelectorAsSelector(w.ObjectSelector); err != nil {
					return ScopeRules{}, fmt.Errorf("MutatingWebhookConfiguration %s, webhook %s: objectSelector: %w", c.Name, w.Name, err)
				}
			}
			r.entries = append(r.entries, e)
		}
	}
	return r, nil
}

// Merge returns the rules of r and o together (entries of several configurations).
func (r ScopeRules) Merge(o ScopeRules) ScopeRules {
	return ScopeRules{entries: append(append([]scopeEntry(nil), r.entries...), o.entries...)}
}

// Found reports whether any pod webhook entry was read.
func (r ScopeRules) Found() bool { return len(r.entries) > 0 }

// CoversNamespace reports whether some entry's namespaceSelector matches nsLabels.
func (r ScopeRules) CoversNamespace(nsLabels map[string]string) bool {
	for _, e := range r.entries {
		if e.namespaces.Matches(labels.Set(nsLabels)) {
			return true
		}
	}
	return false
}

// Covers reports whether the API server sends a pod with podLabels, in a namespace with
// nsLabels, to the webhook.
func (r ScopeRules) Covers(nsLabels, podLabels map[string]string) bool {
	for _, e := range r.entries {
		if e.namespaces.Matches(labels.Set(nsLabels)) && e.objects.Matches(labels.Set(podLabels)) {
			return true
		}
	}
	return false
}

// NotCoveredWhy says, for a namespace (with nsLabels, of what: a workload) that rules do
// not cover, why and what to do: the opt-in label when it lacks it, the namespaceSelector's
// exclusions when it has it.
func NotCoveredWhy(ns string, nsLabels map[string]string, what string) string {
	if nsLabels[strategy.LabelNamespaceEnabled] == "true" || nsLabels[strategy.LabelNamespaceEnabledOriginal] == "enabled" {
		return fmt.Sprintf("namespace %s is labelled but excluded by the webhook's namespaceSelector (blocklisted, the webhook's or Karpenter's namespace, or the chart's namespaceSelector), so nothing places the pods of %s", ns, what)
	}
	return strategy.NotEnabled(ns, what)
}

// NamespaceLabels tells a namespace's labels (policy.Cache); ok is false for a namespace
// not seen.
type NamespaceLabels func(ns string) (map[string]string, bool)

// Scope is which pods the API server sends to the webhook, live: the pod webhook entries
// of the product's MutatingWebhookConfiguration as they are in the cluster (a hand edit
// counts), read from an informer limited to that one object by name (as the chart's RBAC
// allows), matched against the namespaces' labels. Readers that act or report on pods
// after admission (the convergence loop, policy status, the cost metrics) ask it, so they
// act only where admission was asked.
type Scope struct {
	name       string
	informer   cache.SharedIndexInformer
	factory    informers.SharedInformerFactory
	namespaces NamespaceLabels
	rules      atomic.Pointer[scopeState]
}

// scopeState is the rules read from the configuration, or why there are none.
type scopeState struct {
	rules ScopeRules
	// unseen says why the scope is not known ("" when it is): then nothing is covered.
	unseen string
}

// NewScope watches the MutatingWebhookConfiguration name; namespaces tells namespace
// labels. Start it, then wait for HasSynced.
func NewScope(client kubernetes.Interface, name string, namespaces NamespaceLabels, resync time.Duration) (*Scope, error) {
	f := informers.NewSharedInformerFactoryWithOptions(client, resync, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
	}))
	s := &Scope{name: name, factory: f, namespaces: namespaces,
		informer: f.Admissionregistration().V1().MutatingWebhookConfigurations().Informer()}
	s.rules.Store(&scopeState{unseen: "the MutatingWebhookConfiguration " + name + " has not been read yet"})
	reread := func(any) { s.reread() }
	if _, err := s.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: reread, UpdateFunc: func(_, o any) { reread(o) }, DeleteFunc: reread,
	}); err != nil {
		return nil, fmt.Errorf("scope handler: %w", err)
	}
	return s, nil
}

// Start runs the informer until ctx ends.
func (s *Scope) Start(ctx context.Context) { s.factory.Start(ctx.Done()) }

// HasSynced reports whether the configuration has been listed.
func (s *Scope) HasSynced() bool {
	if !s.informer.HasSynced() {
		return false
	}
	s.reread() // a configuration that does not exist has no event
	return true
}

// OnChange calls changed (on informer goroutines) whenever the configuration changes.
func (s *Scope) OnChange(changed func()) error {
	call := func(any) { changed() }
	if _, err := s.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: call, UpdateFunc: func(_, o any) { call(o) }, DeleteFunc: call,
	}); err != nil {
		return fmt.Errorf("scope change handler: %w", err)
	}
	return nil
}

// reread publishes the rules of the configuration in the store.
func (s *Scope) reread() {
	obj, ok, err := s.informer.GetStore().GetByKey(s.name)
	st := &scopeState{}
	switch c, isConfig := obj.(*admissionregistrationv1.MutatingWebhookConfiguration); {
	case err != nil || !ok || !isConfig:
		st.unseen = "the MutatingWebhookConfiguration " + s.name + " does not exist: the API server sends no pod to the webhook"
	default:
		if st.rules, err = ScopeRulesOf(c); err != nil {
			st.unseen = err.Error()
		} else if !st.rules.Found() {
			st.unseen = "the MutatingWebhookConfiguration " + s.name + " has no webhook " + PodWebhookName + ": the API server sends no pod to the webhook"
		}
	}
	s.rules.Store(st)
}

// Unseen says why the scope is not known ("" when it is); while it is not, Covers covers
// nothing.
func (s *Scope) Unseen() string { return s.rules.Load().unseen }

// CoversNamespace reports whether the API server sends pods of namespace ns to the
// webhook: some pod entry's namespaceSelector matches it. The objectSelector is left to
// CoversPod: workloads in the cache carry no pod labels.
func (s *Scope) CoversNamespace(ns string) bool {
	st := s.rules.Load()
	if st.unseen != "" {
		return false
	}
	nsLabels, ok := s.namespaces(ns)
	return ok && st.rules.CoversNamespace(nsLabels)
}

// WhyNot says why the API server does not send the pods of namespace ns to the webhook,
// in words a user acts on (what names the workload); "" when it does.
func (s *Scope) WhyNot(ns, what string) string {
	if st := s.rules.Load(); st.unseen != "" {
		return st.unseen
	}
	nsLabels, ok := s.namespaces(ns)
	if !ok {
		return "namespace " + ns + " is not in the cache yet"
	}
	return s.WhyNotLabels(ns, nsLabels, what)
}

// WhyNotLabels is WhyNot for a namespace with nsLabels (a Namespace being applied);
// "" also while the scope is not known: nothing is said on a guess.
func (s *Scope) WhyNotLabels(ns string, nsLabels map[string]string, what string) string {
	st := s.rules.Load()
	if st.unseen != "" || st.rules.CoversNamespace(nsLabels) {
		return ""
	}
	return NotCoveredWhy(ns, nsLabels, what)
}

// CoversPod reports whether the API server sends a pod with podLabels, in namespace ns,
// to the webhook: namespaceSelector and objectSelector of one entry both match.
func (s *Scope) CoversPod(ns string, podLabels map[string]string) bool {
	st := s.rules.Load()
	if st.unseen != "" {
		return false
	}
	nsLabels, ok := s.namespaces(ns)
	return ok && st.rules.Covers(nsLabels, podLabels)
}
