package clusterview

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
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
	// intern shares the values the cached pods have in common (see interner).
	intern *interner
}

// NewCaches builds the informers; call Start, then WaitForSync.
func NewCaches(client kubernetes.Interface, resync time.Duration) (*Caches, error) {
	c := &Caches{
		intern:    newInterner(),
		workloads: informers.NewSharedInformerFactoryWithOptions(client, resync, informers.WithTransform(trimWorkload)),
	}
	c.pods = informers.NewSharedInformerFactoryWithOptions(client, resync,
		informers.WithTransform(func(obj any) (any, error) { return trimPod(c.intern, obj) }),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = labels.Set{strategy.LabelManaged: "true"}.String()
		}))
	podInformer := c.pods.Core().V1().Pods().Informer()
	if err := podInformer.AddIndexers(cache.Indexers{ownerIndex: indexByController}); err != nil {
		return nil, fmt.Errorf("add pod owner index: %w", err)
	}
	c.podIndex = podInformer.GetIndexer()
	apps := c.workloads.Apps().V1()
	c.Resolver = &ListerResolver{
		Client:       client,
		ReplicaSets:  apps.ReplicaSets().Lister(),
		Deployments:  apps.Deployments().Lister(),
		StatefulSets: apps.StatefulSets().Lister(),
	}
	return c, nil
}

// Start runs the informers until ctx ends.
func (c *Caches) Start(ctx context.Context) {
	c.workloads.Start(ctx.Done())
	c.pods.Start(ctx.Done())
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
	return nil
}

// Unsynced names the informers that have not listed their objects yet ("pods",
// "replicasets", "deployments", "statefulsets"), for a readiness answer that says
// what it waits for.
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
	// placedPod returns the placed pod an event is about; a deletion may come as a
	// tombstone when the watch missed it.
	placedPod := func(obj any) *corev1.Pod {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
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
	reg, err := c.pods.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    notify,
		UpdateFunc: func(_, obj any) { notify(obj) },
		DeleteFunc: func(obj any) {
			if pod := placedPod(obj); pod != nil {
				gone(pod)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("watch placed pods: %w", err)
	}
	return reg.HasSynced, nil
}

// Held returns the seats held by the live placed pods of a revision (pods of its own
// namespace only).
func (c *Caches) Held(revision Revision) map[int]bool {
	objs, err := c.podIndex.ByIndex(ownerIndex, revision.Namespace+"/"+string(revision.UID))
	if err != nil {
		return nil
	}
	held := make(map[int]bool, len(objs))
	for _, o := range objs {
		pod := podOf(o)
		if pod == nil || !strategy.HoldsSeat(pod) {
			continue
		}
		if seat, ok := strategy.SeatOf(pod); ok {
			held[seat] = true
		}
	}
	return held
}

// EachPodOf calls fn with each cached placed pod of revision (a ReplicaSet or
// StatefulSet, pods of its own namespace only), terminating ones included. The pod is
// a view valid during the call only, whose maps and slices are the cache's own: do not
// modify it, and copy it (*pod) to keep it. Making a *corev1.Pod costs 1.2 KiB, so a
// reader that looks at every pod of big revisions every few seconds (the convergence
// loop) keeps copies only of the few pods it needs.
func (c *Caches) EachPodOf(revision Revision, fn func(pod *corev1.Pod)) {
	objs, err := c.podIndex.ByIndex(ownerIndex, revision.Namespace+"/"+string(revision.UID))
	if err != nil {
		return
	}
	var view corev1.Pod
	for _, o := range objs {
		switch p := o.(type) {
		case *cachedPod:
			p.fill(&view)
			fn(&view)
		case *corev1.Pod:
			fn(p)
		}
	}
}

func indexByController(obj any) ([]string, error) {
	pod, ok := obj.(metav1.Object)
	if !ok {
		return nil, nil
	}
	if ref := metav1.GetControllerOfNoCopy(pod); ref != nil {
		return []string{pod.GetNamespace() + "/" + string(ref.UID)}, nil
	}
	return nil, nil
}

// cachedPod is what the pod cache keeps of a placed pod (see trimPod). A *corev1.Pod,
// even with its spec and status emptied, is 1.2 KiB of fields per pod, most of them
// zero; this is a quarter of that. The informer's store and indexes only need its
// ObjectMeta; readers get a *corev1.Pod made from it (pod).
type cachedPod struct {
	metav1.ObjectMeta
	nodeName     string
	nodeSelector map[string]string
	phase        corev1.PodPhase
	conditions   []corev1.PodCondition
}

// pod returns a Pod holding what p kept; its maps and slices are p's own.
func (p *cachedPod) pod() *corev1.Pod {
	pod := new(corev1.Pod)
	p.fill(pod)
	return pod
}

// fill makes pod hold what p kept, and nothing else; its maps and slices are p's own.
func (p *cachedPod) fill(pod *corev1.Pod) {
	*pod = corev1.Pod{
		ObjectMeta: p.ObjectMeta,
		Spec:       corev1.PodSpec{NodeName: p.nodeName, NodeSelector: p.nodeSelector},
		Status:     corev1.PodStatus{Phase: p.phase, Conditions: p.conditions},
	}
}

// podOf returns the pod a cache object or event is about (a deletion may come as a
// tombstone when the watch missed it), nil if it is no pod.
func podOf(obj any) *corev1.Pod {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	switch o := obj.(type) {
	case *cachedPod:
		return o.pod()
	case *corev1.Pod:
		return o
	}
	return nil
}

// cachedAnnotations are the annotations of a placed pod that are read from the cache:
// the seat and term (ledger, convergence loop), the reservation the pod fulfils
// (ledger) and the term it fell back from (convergence loop).
var cachedAnnotations = []string{strategy.AnnotationSeat, strategy.AnnotationTerm, strategy.AnnotationReservation, strategy.AnnotationFallbackFrom}

// trimPod keeps, in a cachedPod, what the ledger and the convergence loop read:
// identity, controller, seat annotations, node name and selector (a few labels: the
// term it is on), phase, deletion, and the Ready and PodScheduled conditions without
// their messages (the loop's readiness and stranded-pod checks). Everything else
// (labels, containers, env, volumes, managed fields) is dropped. Values the pods of a
// revision or a term have in common come from in, shared. Anything but a *corev1.Pod
// (an object trimmed already) is returned as is.
func trimPod(in *interner, obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	kept := make(map[string]string, len(cachedAnnotations))
	for _, k := range cachedAnnotations {
		v, ok := pod.Annotations[k]
		if !ok {
			continue
		}
		// The key is the constant; of the values, the term ones repeat (the seat and
		// the reservation are the pod's own).
		if k == strategy.AnnotationTerm || k == strategy.AnnotationFallbackFrom {
			v = in.string(v)
		}
		kept[k] = v
	}
	var owners []metav1.OwnerReference
	if ref := metav1.GetControllerOfNoCopy(pod); ref != nil {
		owners = in.controllerRef(ref)
	}
	return &cachedPod{
		ObjectMeta: metav1.ObjectMeta{
			Name: pod.Name, Namespace: in.string(pod.Namespace), UID: pod.UID, ResourceVersion: pod.ResourceVersion,
			Annotations: kept, OwnerReferences: owners,
			DeletionTimestamp: pod.DeletionTimestamp, CreationTimestamp: pod.CreationTimestamp,
		},
		nodeName: in.string(pod.Spec.NodeName), nodeSelector: in.selector(pod.Spec.NodeSelector),
		phase: corev1.PodPhase(in.string(string(pod.Status.Phase))), conditions: trimConditions(in, pod.Status.Conditions),
	}, nil
}

// trimConditions keeps what the convergence loop reads, without messages: Ready when
// true (readiness) and PodScheduled when false (since when a pod is unschedulable); so a
// Running pod keeps one condition and a Pending one at most one.
func trimConditions(in *interner, conds []corev1.PodCondition) []corev1.PodCondition {
	var out []corev1.PodCondition
	for _, c := range conds {
		if (c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue) || (c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse) {
			out = append(out, corev1.PodCondition{
				Type: corev1.PodConditionType(in.string(string(c.Type))), Status: corev1.ConditionStatus(in.string(string(c.Status))),
				Reason: in.string(c.Reason), LastTransitionTime: c.LastTransitionTime,
			})
		}
	}
	return out
}

// templateAnnotations keeps the strategy annotations of a pod template: the
// convergence loop reads a revision's strategy as admission reads its pods'.
func templateAnnotations(t corev1.PodTemplateSpec) corev1.PodTemplateSpec {
	var kept map[string]string
	for _, k := range []string{strategy.AnnotationStrategy, strategy.AnnotationStrategyAlias, strategy.AnnotationOptIn} {
		if v, ok := t.Annotations[k]; ok {
			if kept == nil {
				kept = map[string]string{}
			}
			kept[k] = v
		}
	}
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: kept}}
}

// trimWorkload drops pod templates, managed fields and the last-applied copy from
// ReplicaSets, Deployments and StatefulSets: only metadata (annotations, owners),
// replica counts and the template's strategy annotations are read.
func trimWorkload(obj any) (any, error) {
	meta := func(m metav1.ObjectMeta) metav1.ObjectMeta {
		m.ManagedFields = nil
		if _, ok := m.Annotations[corev1.LastAppliedConfigAnnotation]; ok {
			a := make(map[string]string, len(m.Annotations))
			for k, v := range m.Annotations {
				if k != corev1.LastAppliedConfigAnnotation {
					a[k] = v
				}
			}
			m.Annotations = a
		}
		return m
	}
	switch o := obj.(type) {
	case *appsv1.ReplicaSet:
		return &appsv1.ReplicaSet{ObjectMeta: meta(o.ObjectMeta), Spec: appsv1.ReplicaSetSpec{Replicas: o.Spec.Replicas, Template: templateAnnotations(o.Spec.Template)}}, nil
	case *appsv1.Deployment:
		return &appsv1.Deployment{ObjectMeta: meta(o.ObjectMeta), Spec: appsv1.DeploymentSpec{Replicas: o.Spec.Replicas, Template: templateAnnotations(o.Spec.Template)}}, nil
	case *appsv1.StatefulSet:
		return &appsv1.StatefulSet{ObjectMeta: meta(o.ObjectMeta), Spec: appsv1.StatefulSetSpec{Replicas: o.Spec.Replicas, Ordinals: o.Spec.Ordinals, Template: templateAnnotations(o.Spec.Template)}}, nil
	}
	return obj, nil
}
