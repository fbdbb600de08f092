package karpenter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/karpenter/nodegroups"
)

// defaultDiscoveryInterval is how often Catalog looks for the NodePool API
// while it is not served (Karpenter not installed yet).
const defaultDiscoveryInterval = time.Minute

// NodeGroupSource is a view of EKS managed node groups;
// *nodegroups.Cache implements it.
type NodeGroupSource interface {
	// Run keeps the view fresh until ctx is done.
	Run(ctx context.Context)
	// HasSynced reports whether a first refresh finished.
	HasSynced() bool
	// Groups returns the current view.
	Groups() []nodegroups.Group
	// Generation changes whenever the view does (Catalog remembers answers until it
	// does).
	Generation() uint64
}

// Options configure a Catalog.
type Options struct {
	// Kube lists and watches Nodes and discovers the NodePool API. Required.
	Kube kubernetes.Interface
	// Dynamic watches karpenter.sh/v1 NodePools; nil leaves NodePools out.
	Dynamic dynamic.Interface
	// NodeGroups is the EKS managed node group view; nil leaves node groups
	// out (no cluster name configured).
	NodeGroups NodeGroupSource
	// Matcher decides what serves a term; NewMatcher() when nil.
	Matcher *Matcher
	// Log receives informer and discovery problems; discarded when nil.
	Log logrus.FieldLogger
	// ResyncPeriod of the informers; 0 disables resync, which matching does
	// not need.
	ResyncPeriod time.Duration
	// DiscoveryInterval is how often to look for the NodePool API while it
	// is absent; defaultDiscoveryInterval when zero.
	DiscoveryInterval time.Duration
}

// NodePool watch states.
const (
	poolsUnknown  int32 = iota // not looked for yet, or discovery failing
	poolsAbsent                // API not served: nothing to wait for
	poolsWatching              // informer started
)

// Catalog knows the NodePools, EKS managed node groups and Ready Nodes of the
// cluster and tells which of them serve a term. Create it with NewCatalog,
// start it once with Run, and wait for HasSynced before trusting Serving.
// Safe for concurrent use.
type Catalog struct {
	matcher       *Matcher
	log           logrus.FieldLogger
	discovery     discovery.DiscoveryInterface
	nodes         cache.SharedIndexInformer
	pools         cache.SharedIndexInformer // nil when NodePools are off
	poolState     atomic.Int32
	groups        NodeGroupSource // nil when node groups are off
	discoveryTick time.Duration

	// capacityGen counts the changes of Nodes and NodePools that can change what
	// serves a term (not heartbeats or NodePool status counts).
	capacityGen atomic.Uint64
	memo        tolerationsMemo
}

// NewCatalog builds a Catalog; nothing is listed or watched before Run.
func NewCatalog(o Options) (*Catalog, error) {
	if o.Kube == nil {
		return nil, errors.New("karpenter: Options.Kube is required")
	}
	c := &Catalog{
		matcher:       o.Matcher,
		log:           o.Log,
		discovery:     o.Kube.Discovery(),
		groups:        o.NodeGroups,
		discoveryTick: o.DiscoveryInterval,
	}
	if c.matcher == nil {
		c.matcher = NewMatcher()
	}
	if c.log == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		c.log = l
	}
	if c.discoveryTick <= 0 {
		c.discoveryTick = defaultDiscoveryInterval
	}
	var err error
	if c.nodes, err = newNodeInformer(o.Kube, o.ResyncPeriod); err != nil {
		return nil, err
	}
	if err := c.countChanges(c.nodes, nodeMatters); err != nil {
		return nil, err
	}
	if o.Dynamic != nil {
		if c.pools, err = newNodePoolInformer(o.Dynamic, o.ResyncPeriod); err != nil {
			return nil, err
		}
		if err := c.countChanges(c.pools, nodePoolMatters); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// countChanges bumps capacityGen on every add and delete of inf, and on each update
// for which changed reports a difference.
func (c *Catalog) countChanges(inf cache.SharedIndexInformer, changed func(old, cur interface{}) bool) error {
	bump := func(interface{}) { c.capacityGen.Add(1) }
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    bump,
		DeleteFunc: bump,
		UpdateFunc: func(old, cur interface{}) {
			if changed(old, cur) {
				bump(cur)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("watching capacity changes: %w", err)
	}
	return nil
}

// Run watches Nodes and NodePools and refreshes node groups until ctx is
// done. Call it once. When the NodePool API is not served (Karpenter not
// installed) it looks for it every DiscoveryInterval and starts watching once
// it appears; meanwhile NodePools do not hold HasSynced back.
func (c *Catalog) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { c.nodes.RunWithContext(ctx) })
	if c.pools != nil {
		wg.Go(func() { c.runNodePools(ctx) })
	}
	if c.groups != nil {
		wg.Go(func() { c.groups.Run(ctx) })
	}
	wg.Wait()
}

func (c *Catalog) runNodePools(ctx context.Context) {
	var lastErr string
	for {
		ok, err := served(c.discovery, nodePoolGVR().Resource)
		switch {
		case err != nil:
			if err.Error() != lastErr {
				c.log.WithError(err).Warn("looking for the NodePool API failed; retrying")
				lastErr = err.Error()
			}
		case ok:
			c.poolState.Store(poolsWatching)
			c.log.Info("watching Karpenter NodePools")
			c.pools.RunWithContext(ctx)
			return
		default:
			if c.poolState.Swap(poolsAbsent) != poolsAbsent {
				c.log.Infof("%s nodepools not served (Karpenter not installed?); looking again every %s", nodePoolGroupVersion, c.discoveryTick)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(c.discoveryTick):
		}
	}
}

// HasSynced reports whether Nodes and NodePools have been listed (or the
// NodePool API was found absent) and the first node group refresh finished.
func (c *Catalog) HasSynced() bool { return len(c.Unsynced()) == 0 }

// Unsynced names the views not listed yet ("nodes", "nodepools", "nodegroups"), for a
// readiness answer that says what it waits for.
func (c *Catalog) Unsynced() []string {
	var out []string
	if !c.nodes.HasSynced() {
		out = append(out, "nodes")
	}
	if c.pools != nil {
		switch c.poolState.Load() {
		case poolsUnknown:
			out = append(out, "nodepools")
		case poolsWatching:
			if !c.pools.HasSynced() {
				out = append(out, "nodepools")
			}
		}
	}
	if c.groups != nil && !c.groups.HasSynced() {
		out = append(out, "nodegroups")
	}
	return out
}

// NodesSynced reports whether the Nodes have been listed (HasSynced also waits for
// NodePools and node groups).
func (c *Catalog) NodesSynced() bool { return c.nodes.HasSynced() }

// NodeByInstance returns the Node whose spec.providerID names instance id
// (providerid.InstanceID): the interruption signals read the catalog's Node watch
// rather than keep one of their own. The Node is the cache's slim copy (name, labels,
// taints, providerID, Ready), shared: do not modify it.
func (c *Catalog) NodeByInstance(id string) (*corev1.Node, bool) {
	objs, err := c.nodes.GetIndexer().ByIndex(instanceIndex, id)
	if err != nil || len(objs) == 0 {
		return nil, false
	}
	n, ok := objs[0].(*corev1.Node)
	return n, ok
}

// EachNode calls fn with every watched Node, slim and shared as NodeByInstance's.
func (c *Catalog) EachNode(fn func(*corev1.Node)) {
	for _, obj := range c.nodes.GetStore().List() {
		if n, ok := obj.(*corev1.Node); ok {
			fn(n)
		}
	}
}

// Tolerations answers what a pod selecting term needs: tolerations for the taints of
// the NodePools and node groups serving it (TolerationsFor), and whether anything,
// including a Ready node, serves it at all. It runs on every admission, so answers are
// remembered per term until a Node, NodePool or node group changes in a way that
// matters to them (Serving walks every NodePool and Node; BenchmarkTolerations
// measures it). An answer may lag a change by the moment between the
// informer's store taking it and its event handler counting it.
func (c *Catalog) Tolerations(term map[string]string) (tolerations []corev1.Toleration, served bool) {
	a := c.answer(term)
	return slices.Clone(a.tolerations), a.served
}

// Architectures returns the CPU architectures (kubernetes.io/arch values) the capacity
// serving term can give a pod selecting it, sorted: the union over the NodePools, node
// groups and Ready nodes Serving finds (see Source.Architectures). Remembered as
// Tolerations' answers are.
func (c *Catalog) Architectures(term map[string]string) []string {
	return slices.Clone(c.answer(term).arches)
}

// answer is what Tolerations and Architectures answer for term, remembered per term
// until the capacity changes.
func (c *Catalog) answer(term map[string]string) tolerationsAnswer {
	key := selectorKey(term)
	gen := c.generation()
	if a, ok := c.memo.get(key, gen); ok {
		return a
	}
	sources := c.Serving(term)
	a := tolerationsAnswer{tolerations: TolerationsFor(sources), served: len(sources) > 0, arches: architecturesOf(sources)}
	c.memo.put(key, gen, a)
	return a
}

// generation identifies the state of the capacity Serving reads: it changes whenever
// a relevant Node, NodePool or node group change was seen.
func (c *Catalog) generation() memoGeneration {
	g := memoGeneration{capacity: c.capacityGen.Load()}
	if c.groups != nil {
		g.groups = c.groups.Generation()
	}
	return g
}

// Serving returns the capacity that can carry a pod whose nodeSelector holds
// term: NodePools (not being deleted, not reported not-Ready), usable EKS
// managed node groups, then Ready schedulable Nodes that belong to none of
// the NodePools and node groups already listed. Each kind is sorted by name.
// An empty result means nothing can run the term's pods: typically a typo in
// a label. The Taints in the result are copies.
func (c *Catalog) Serving(term map[string]string) []Source {
	var out []Source
	pools, groups := sets.New[string](), sets.New[string]()

	if c.pools != nil {
		for _, obj := range c.pools.GetStore().List() {
			np, ok := obj.(*karpv1.NodePool)
			if !ok || !nodePoolUsable(np) {
				continue
			}
			if err := c.matcher.NodePool(np, term); err != nil {
				continue
			}
			pools.Insert(np.Name)
			out = append(out, Source{Kind: KindNodePool, Name: np.Name, Taints: copyTaints(np.Spec.Template.Spec.Taints), Architectures: nodePoolArchitectures(np, term)})
		}
	}
	if c.groups != nil {
		for _, g := range c.groups.Groups() {
			if !g.Usable() || c.matcher.NodeGroup(g, term) != nil {
				continue
			}
			groups.Insert(g.Name)
			out = append(out, Source{Kind: KindNodeGroup, Name: g.Name, Taints: copyTaints(g.Taints), Architectures: labelArchitectures(g.Labels, term)})
		}
	}
	for _, obj := range c.nodes.GetStore().List() {
		n, ok := obj.(*corev1.Node)
		if !ok || !nodeUsable(n) {
			continue
		}
		if pools.Has(n.Labels[karpv1.NodePoolLabelKey]) || groups.Has(n.Labels[nodegroups.LabelNodeGroup]) {
			continue
		}
		if c.matcher.Node(n.Labels, term) != nil {
			continue
		}
		out = append(out, Source{Kind: KindNode, Name: n.Name, Taints: copyTaints(n.Spec.Taints), Architectures: labelArchitectures(n.Labels, term)})
	}
	sort.SliceStable(out, func(i, j int) bool {
		if ki, kj := kindOrder(out[i].Kind), kindOrder(out[j].Kind); ki != kj {
			return ki < kj
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// nodePools returns the watched NodePools (typed, shared with the cache: do not
// modify), by name: LaunchView reads them, and tests.
func (c *Catalog) nodePools() []*karpv1.NodePool {
	if c.pools == nil {
		return nil
	}
	objs := c.pools.GetStore().List()
	out := make([]*karpv1.NodePool, 0, len(objs))
	for _, obj := range objs {
		if np, ok := obj.(*karpv1.NodePool); ok {
			out = append(out, np)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func kindOrder(kind string) int {
	switch kind {
	case KindNodePool:
		return 0
	case KindNodeGroup:
		return 1
	}
	return 2
}

func copyTaints(t []corev1.Taint) []corev1.Taint {
	if len(t) == 0 {
		return nil
	}
	return append([]corev1.Taint(nil), t...)
}
