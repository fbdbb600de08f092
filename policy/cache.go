package policy

import (
	"context"
	"fmt"
	"maps"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/api/v1alpha1"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// Cache keeps the policies and namespaces current from informers.
//
// Policies come from a dynamic informer whose transform decodes each object into the
// typed struct and compiles it (a cachedPolicy): the store holds only what lookups read,
// and no generated clientset, lister or informer code has to be kept with the API. On
// every policy event the lists are rebuilt into an immutable view (policies change
// rarely; lookups are on every admission) published through an atomic pointer.
// Namespaces come from a typed informer trimmed to labels and the strategy link.
type Cache struct {
	namespaced, cluster, namespaces cache.SharedIndexInformer
	view                            atomic.Pointer[policies]
	log                             logrus.FieldLogger
}

// NewCache builds the informers. dyn may be nil when the policy CRDs are not installed:
// then only namespace defaults apply.
func NewCache(client kubernetes.Interface, dyn dynamic.Interface, resync time.Duration, log logrus.FieldLogger) (*Cache, error) {
	c := &Cache{log: log}
	c.view.Store(newPolicies(nil))
	nsFactory := informers.NewSharedInformerFactoryWithOptions(client, resync, informers.WithTransform(trimNamespace))
	c.namespaces = nsFactory.Core().V1().Namespaces().Informer()
	if dyn == nil {
		return c, nil
	}
	f := dynamicinformer.NewDynamicSharedInformerFactory(dyn, resync)
	c.namespaced = f.ForResource(v1alpha1.PlacementPolicies).Informer()
	c.cluster = f.ForResource(v1alpha1.ClusterPlacementPolicies).Informer()
	rebuild := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.rebuild() },
		UpdateFunc: func(any, any) { c.rebuild() },
		DeleteFunc: func(any) { c.rebuild() },
	}
	for _, inf := range []cache.SharedIndexInformer{c.namespaced, c.cluster} {
		if err := inf.SetTransform(compilePolicy); err != nil {
			return nil, fmt.Errorf("policy informer transform: %w", err)
		}
		if _, err := inf.AddEventHandler(rebuild); err != nil {
			return nil, fmt.Errorf("policy informer handler: %w", err)
		}
	}
	return c, nil
}

// Start runs the informers until ctx ends.
func (c *Cache) Start(ctx context.Context) {
	for _, inf := range c.informers() {
		go inf.RunWithContext(ctx)
	}
}

func (c *Cache) informers() []cache.SharedIndexInformer {
	if c.namespaced == nil {
		return []cache.SharedIndexInformer{c.namespaces}
	}
	return []cache.SharedIndexInformer{c.namespaces, c.namespaced, c.cluster}
}

// Unsynced names the informers that have not listed yet ("namespaces",
// "placementpolicies", "clusterplacementpolicies").
func (c *Cache) Unsynced() []string {
	var out []string
	names := []string{"namespaces", v1alpha1.ResourcePlacementPolicies, v1alpha1.ResourceClusterPlacementPolicies}
	for i, inf := range c.informers() {
		if !inf.HasSynced() {
			out = append(out, names[i])
		}
	}
	return out
}

// WaitForSync blocks until every informer has synced or ctx ends.
func (c *Cache) WaitForSync(ctx context.Context) error {
	var synced []cache.InformerSynced
	for _, inf := range c.informers() {
		synced = append(synced, inf.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("policy caches did not sync: %v", c.Unsynced())
	}
	return nil
}

// rebuild publishes a new view from the policy stores.
func (c *Cache) rebuild() {
	var all []*Compiled
	for _, inf := range []cache.SharedIndexInformer{c.namespaced, c.cluster} {
		for _, obj := range inf.GetStore().List() {
			if p, ok := obj.(*cachedPolicy); ok {
				all = append(all, p.compiled)
			}
		}
	}
	c.view.Store(newPolicies(all))
}

// OnChange calls changed with the namespace of a PlacementPolicy that was added,
// changed or deleted, or of a Namespace whose labels or default changed, and with ""
// for a ClusterPlacementPolicy (every namespace). Handlers run on informer goroutines.
func (c *Cache) OnChange(changed func(namespace string)) error {
	policyChanged := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if p, ok := obj.(*cachedPolicy); ok {
			changed(p.compiled.Namespace)
		}
	}
	type registration struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandler
	}
	handlers := []registration{{c.namespaces, cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*cachedNamespace)
			n, ok2 := newObj.(*cachedNamespace)
			if ok1 && ok2 && (!maps.Equal(o.Labels, n.Labels) || !maps.Equal(o.Link.Annotations, n.Link.Annotations) || o.Audit != n.Audit || o.MovesOff != n.MovesOff) {
				changed(n.meta.Name)
			}
		},
	}}}
	if c.namespaced != nil {
		h := cache.ResourceEventHandlerFuncs{AddFunc: policyChanged, UpdateFunc: func(_, obj any) { policyChanged(obj) }, DeleteFunc: policyChanged}
		handlers = append(handlers, registration{c.namespaced, h}, registration{c.cluster, h})
	}
	for _, h := range handlers {
		if _, err := h.inf.AddEventHandler(h.h); err != nil {
			return fmt.Errorf("policy change handler: %w", err)
		}
	}
	return nil
}

// namespace returns what the cache knows of namespace ns (nil: nothing).
func (c *Cache) namespace(ns string) *Namespace {
	obj, ok, err := c.namespaces.GetStore().GetByKey(ns)
	if err != nil || !ok {
		return nil
	}
	if n, ok := obj.(*cachedNamespace); ok {
		return &n.Namespace
	}
	return nil
}

// AppendLinks appends to dst the links that follow w's own annotations: the policy that
// governs it, then its namespace's default. It allocates nothing beyond dst's growth.
func (c *Cache) AppendLinks(dst []strategy.AnnotatedObject, w Workload) []strategy.AnnotatedObject {
	if c == nil {
		return dst
	}
	return appendLinks(dst, c.view.Load(), w, c.namespace(w.Namespace), false)
}

// AppendAuditLinks is AppendLinks as if every policy and namespace default in audit
// mode were enforced.
func (c *Cache) AppendAuditLinks(dst []strategy.AnnotatedObject, w Workload) []strategy.AnnotatedObject {
	if c == nil {
		return dst
	}
	return appendLinks(dst, c.view.Load(), w, c.namespace(w.Namespace), true)
}

// MovesOff reports whether namespace ns is annotated converge "false" (Stopped).
func (c *Cache) MovesOff(ns string) bool {
	n := c.namespace(ns)
	return n != nil && n.MovesOff
}

// Match tells which policy governs w and which it won against.
func (c *Cache) Match(w Workload) Match {
	if c == nil {
		return Match{}
	}
	return c.view.Load().match(w, c.namespace(w.Namespace), false)
}

// cachedPolicy is what the policy stores hold: identity for the informer, and the
// compiled policy.
type cachedPolicy struct {
	meta     metav1.ObjectMeta
	compiled *Compiled
}

// GetObjectMeta lets the informer key and version the object.
func (p *cachedPolicy) GetObjectMeta() metav1.Object { return &p.meta }

// cachedNamespace is what the namespace store holds.
type cachedNamespace struct {
	meta metav1.ObjectMeta
	Namespace
}

// GetObjectMeta lets the informer key and version the object.
func (n *cachedNamespace) GetObjectMeta() metav1.Object { return &n.meta }

func identity(m metav1.Object) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: m.GetName(), Namespace: m.GetNamespace(), UID: m.GetUID(), ResourceVersion: m.GetResourceVersion()}
}

// compilePolicy turns an unstructured policy into a cachedPolicy. An object that does
// not decode (a schema the CRD let through, an older version) is kept as a policy that
// matches nothing and says why.
func compilePolicy(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	c, err := Decode(u)
	if err != nil {
		c = &Compiled{Namespace: u.GetNamespace(), Name: u.GetName(), UID: u.GetUID(), SelectorErr: err,
			Link: strategy.AnnotatedObject{Name: u.GetKind() + " " + u.GetName(), Origin: strategy.Origin(u.GetKind())}}
	}
	return &cachedPolicy{meta: identity(u), compiled: c}, nil
}

// Decode compiles an unstructured PlacementPolicy or ClusterPlacementPolicy.
func Decode(u *unstructured.Unstructured) (*Compiled, error) {
	switch u.GetKind() {
	case v1alpha1.KindPlacementPolicy:
		var p v1alpha1.PlacementPolicy
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p); err != nil {
			return nil, fmt.Errorf("decode %s %s/%s: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
		}
		return CompileNamespaced(&p), nil
	case v1alpha1.KindClusterPlacementPolicy:
		var p v1alpha1.ClusterPlacementPolicy
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p); err != nil {
			return nil, fmt.Errorf("decode %s %s: %w", u.GetKind(), u.GetName(), err)
		}
		return CompileCluster(&p), nil
	}
	return nil, fmt.Errorf("%q is not a policy kind", u.GetKind())
}

// trimNamespace keeps a namespace's identity, labels and strategy link.
func trimNamespace(obj any) (any, error) {
	ns, ok := obj.(*corev1.Namespace)
	if !ok {
		return obj, nil
	}
	return &cachedNamespace{meta: identity(ns), Namespace: *NamespaceOf(ns)}, nil
}

// EachNamespace calls fn with the name and labels of every namespace the cache has seen.
func (c *Cache) EachNamespace(fn func(name string, labels map[string]string)) {
	for _, obj := range c.namespaces.GetStore().List() {
		if n, ok := obj.(*cachedNamespace); ok {
			fn(n.meta.Name, n.Labels)
		}
	}
}

// NamespaceLabels returns the labels of namespace ns as the cache has them; ok is false
// while the cache has not seen it.
func (c *Cache) NamespaceLabels(ns string) (map[string]string, bool) {
	n := c.namespace(ns)
	if n == nil {
		return nil, false
	}
	return n.Labels, true
}
