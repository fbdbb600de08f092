package clusterview

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// ownerIndex indexes pods by namespace and controller UID: a pod naming a workload's
// UID from another namespace never counts for it.
const ownerIndex = "namespace/controller-uid"

// Caches holds the shared informers the webhook reads instead of calling the API server
// per admission: placed pods (selected by the managed label, so unrelated pods are never
// cached) and the workloads that own pods. Transform functions strip what is not read.
//
// The pod informer's store holds *cachedPod, not *corev1.Pod: read it through
// OnPlacedPods, Held and EachPodOf, never through a pod lister.
type Caches struct {
	workloads informers.SharedInformerFactory
	pods      informers.SharedInformerFactory
	podIndex  cache.Indexer
	Resolver  *ListerResolver
	resync    time.Duration
	// mu guards what WatchRollouts may set after Start: rollouts watches Argo Rollouts'
	// metadata (nil until WatchRollouts: not served); rolloutHandlers are the handlers
	// OnRevisionChange registered, for an informer made later; started is Start's ctx.
	mu              sync.Mutex
	rollouts        metadatainformer.SharedInformerFactory
	rolloutInformer cache.SharedIndexInformer
	rolloutHandlers []cache.ResourceEventHandler
	started         context.Context
}

// NewCaches builds the informers; call Start, then WaitForSync.
func NewCaches(client kubernetes.Interface, resync time.Duration) (*Caches, error) {
	c := &Caches{
		resync:    resync,
		workloads: informers.NewSharedInformerFactoryWithOptions(client, resync, informers.WithTransform(trimWorkload)),
	}
	c.pods = informers.NewSharedInformerFactoryWithOptions(client, resync, informers.WithTransform(trimPod))
	placed := labels.Set{strategy.LabelManaged: "true"}.String()
	podInformer := c.pods.InformerFor(&corev1.Pod{}, func(client kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		return newPodInformer(client, placed, resync)
	})
	if err := podInformer.AddIndexers(cache.Indexers{ownerIndex: indexByController}); err != nil {
		return nil, fmt.Errorf("add pod owner index: %w", err)
	}
	c.podIndex = podInformer.GetIndexer()
	if err := c.addWorkloadIndexers(); err != nil {
		return nil, err
	}
	apps, batch := c.workloads.Apps().V1(), c.workloads.Batch().V1()
	c.Resolver = &ListerResolver{
		Client:       client,
		ReplicaSets:  apps.ReplicaSets().Lister(),
		Deployments:  apps.Deployments().Lister(),
		StatefulSets: apps.StatefulSets().Lister(),
		Jobs:         batch.Jobs().Lister(),
		CronJobs:     batch.CronJobs().Lister(),
	}
	return c, nil
}

// Start runs the informers until ctx ends.
func (c *Caches) Start(ctx context.Context) {
	c.workloads.Start(ctx.Done())
	c.pods.Start(ctx.Done())
	c.mu.Lock()
	defer c.mu.Unlock()
	c.started = ctx
	if c.rollouts != nil {
		c.rollouts.Start(ctx.Done())
	}
}

// WaitForSync blocks until every informer has synced or ctx ends.
func (c *Caches) WaitForSync(ctx context.Context) error {
	for _, f := range []informers.SharedInformerFactory{c.workloads, c.pods} {
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				return fmt.Errorf("cache of %v did not sync", typ)
			}
		}
	}
	c.mu.Lock()
	rollouts := c.rollouts
	c.mu.Unlock()
	if rollouts != nil {
		for gvr, ok := range rollouts.WaitForCacheSync(ctx.Done()) {
			if !ok {
				return fmt.Errorf("cache of %v did not sync", gvr)
			}
		}
	}
	return nil
}

// Unsynced names the informers that have not listed their objects yet ("pods",
// "replicasets", "deployments", "statefulsets", "jobs", "cronjobs", "rollouts" when
// watched), for a
// readiness answer that says what it waits for.
func (c *Caches) Unsynced() []string {
	apps := c.workloads.Apps().V1()
	var out []string
	for _, inf := range []struct {
		name   string
		synced cache.InformerSynced
	}{
		{"pods", c.pods.Core().V1().Pods().Informer().HasSynced},
		{"replicasets", apps.ReplicaSets().Informer().HasSynced},
		{"deployments", apps.Deployments().Informer().HasSynced},
		{"statefulsets", apps.StatefulSets().Informer().HasSynced},
		{"jobs", c.workloads.Batch().V1().Jobs().Informer().HasSynced},
		{"cronjobs", c.workloads.Batch().V1().CronJobs().Informer().HasSynced},
		{"rollouts", c.rolloutSynced},
	} {
		if !inf.synced() {
			out = append(out, inf.name)
		}
	}
	return out
}

// OnPlacedPods calls visible whenever the pod cache shows a live placed pod, and gone
// when a placed pod stops holding its seat (terminating, finished or deleted). The
// returned function reports whether the handlers have been given every pod of the
// initial list (a handler added to a running informer catches up on its own).
func (c *Caches) OnPlacedPods(visible, gone func(pod *corev1.Pod)) (cache.InformerSynced, error) {
	// placedPod returns the placed pod an event is about (podOf unwraps a deletion's
	// tombstone).
	placedPod := func(obj any) *corev1.Pod {
		pod := podOf(obj)
		if pod == nil {
			return nil
		}
		if _, placed := strategy.SeatOf(pod); !placed {
			return nil
		}
		return pod
	}
	notify := func(obj any) {
		switch pod := placedPod(obj); {
		case pod == nil:
		case strategy.HoldsSeat(pod):
			visible(pod)
		default:
			gone(pod)
		}
	}
	// No resyncs (period 0): one hands over every cached pod unchanged, which the ledger
	// knows already; making a pod of each of 20,000 every 10 minutes is garbage for
	// nothing.
	reg, err := c.pods.Core().V1().Pods().Informer().AddEventHandlerWithResyncPeriod(cache.ResourceEventHandlerFuncs{
		AddFunc:    notify,
		UpdateFunc: func(_, obj any) { notify(obj) },
		DeleteFunc: func(obj any) {
			if pod := placedPod(obj); pod != nil {
				gone(pod)
			}
		},
	}, 0)
	if err != nil {
		return nil, fmt.Errorf("watch placed pods: %w", err)
	}
	return reg.HasSynced, nil
}

// Held returns the seats held by the live placed pods of a revision (pods of its own
// namespace only).
func (c *Caches) Held(revision Revision) map[int]bool {
	held := map[int]bool{}
	c.EachPodOf(revision, func(pod PlacedPod) {
		if pod.HoldsSeat() && pod.Placed() {
			held[pod.Seat] = true
		}
	})
	return held
}

// EachPodOf calls fn with each cached placed pod of revision (a ReplicaSet or
// StatefulSet, pods of its own namespace only), terminating ones included, as a value
// that fn may keep: it allocates nothing per pod, so a reader may look at every pod of
// big revisions every few seconds (the convergence loop).
func (c *Caches) EachPodOf(revision Revision, fn func(pod PlacedPod)) {
	objs, err := c.podIndex.ByIndex(ownerIndex, revision.Namespace+"/"+string(revision.UID))
	if err != nil {
		return
	}
	for _, o := range objs {
		switch p := o.(type) {
		case *cachedPod:
			fn(p.placed())
		case *corev1.Pod:
			fn(PlacedPodOf(p))
		}
	}
}

func indexByController(obj any) ([]string, error) {
	if p, ok := obj.(*cachedPod); ok {
		o := p.owner.Value()
		if !o.hasController {
			return nil, nil
		}
		return []string{o.namespace + "/" + string(o.controller.uid)}, nil
	}
	pod, ok := obj.(metav1.Object)
	if !ok {
		return nil, nil
	}
	if ref := metav1.GetControllerOfNoCopy(pod); ref != nil {
		return []string{pod.GetNamespace() + "/" + string(ref.UID)}, nil
	}
	return nil, nil
}
