package clusterview

// What the caches keep of an object: a placed pod as a cachedPod, and workloads
// trimmed to the fields their readers use (the transforms the informers run).

import (
	"maps"
	"math"
	"slices"
	"strings"
	"time"
	"unique"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// cachedPod is what the pod cache keeps of a placed pod (see trimPod): a fraction of
// even an emptied *corev1.Pod, or of one ObjectMeta with the four annotations in a map
// (BenchmarkCachedPodHeap measures it). Values that many pods have in common (owner,
// placement, node, status) are unique handles, one pointer each; the pod's own values
// are packed (compact.go) where they have the usual form, and kept as they came in
// odd otherwise. Readers get a PlacedPod value (EachPodOf) or a *corev1.Pod of its own
// (OnPlacedPods).
type cachedPod struct {
	name string
	uid  types.UID
	// resourceVersion, reservation (the annotation), seat (the annotation) and the
	// times are zero when the value is missing or kept in odd instead.
	resourceVersion uint64
	reservation     packedUUID
	odd             *oddPod // nil: every value is packed
	owner           unique.Handle[podOwner]
	placement       unique.Handle[podPlacement] // zero: no term annotations, no selector
	nodeName        unique.Handle[string]
	status          unique.Handle[podStatus] // zero: no phase, schedulable
	// requests share one handle per value (a revision's pods request alike); it
	// fills what was padding (the record stays 128 bytes).
	requests unique.Handle[podRequests] // zero: none
	// Unix seconds (the API's precision): creation, and the LastTransitionTime of a
	// PodScheduled False condition.
	created, unschedulableSince uint32
	deletion                    *metav1.Time // nil while the pod is not terminating
	seat                        int32
	ready                       bool // Ready is True
	// doNotDisrupt: karpenter.sh/do-not-disrupt is "true" (the loop never evicts it).
	doNotDisrupt bool
}

// oddPod holds the values of a cached pod that have no packed form: a resource version
// or seat that is not a plain decimal number, a reservation that is not a canonical
// UUID, times out of 32-bit range. Empty fields are packed ones.
type oddPod struct {
	resourceVersion, reservation, seat string
	created, unschedulableSince        metav1.Time
}

// podOwner is a cached pod's namespace and controller reference (the only owner any
// reader looks at).
type podOwner struct {
	namespace     string
	controller    podController
	hasController bool
}

// podController is the controller reference of a cached pod.
type podController struct {
	apiVersion, kind, name string
	uid                    types.UID
}

// podPlacement is what a cached pod says of its term: the term and fallback-from
// annotations (cachedAnnotations), its node selector in encodeSelector's form, and
// whether admission found that the term cannot run its images (AnnotationCannotRun is
// there; its text is not kept).
type podPlacement struct {
	term, fallbackFrom, nodeSelector string
	cannotRun                        bool
}

// podRequests are a cached pod's CPU and memory requests as the scheduler and
// Karpenter count them (component-helpers' PodRequests: containers, sidecars, init
// containers, overhead, resized values): its share of a node, which serve's cost
// metrics price.
type podRequests struct {
	cpuMilli, memoryBytes int64
}

// podStatus is a cached pod's phase and, when its PodScheduled condition is False,
// the reason ("": none).
type podStatus struct {
	phase         corev1.PodPhase
	unschedulable string
}

// namespace is the pod's namespace.
func (p *cachedPod) namespace() string { return p.owner.Value().namespace }

// controller returns the pod's controller reference, if it has one.
func (p *cachedPod) controller() (podController, bool) {
	o := p.owner.Value()
	return o.controller, o.hasController
}

// placementOf is the pod's podPlacement (zero when it has none).
func (p *cachedPod) placementOf() podPlacement {
	if p.placement == (unique.Handle[podPlacement]{}) {
		return podPlacement{}
	}
	return p.placement.Value()
}

// statusOf is the pod's podStatus (zero when it has none).
func (p *cachedPod) statusOf() podStatus {
	if p.status == (unique.Handle[podStatus]{}) {
		return podStatus{}
	}
	return p.status.Value()
}

// resourceVersionText, seatText and reservationText are the pod's resource version
// and annotations as they came.
func (p *cachedPod) resourceVersionText() string {
	if p.odd != nil && p.odd.resourceVersion != "" {
		return p.odd.resourceVersion
	}
	return formatDecimal(p.resourceVersion)
}

func (p *cachedPod) seatText() string {
	if p.odd != nil && p.odd.seat != "" {
		return p.odd.seat
	}
	return formatDecimal(uint64(p.seat))
}

func (p *cachedPod) reservationText() string {
	if p.odd != nil && p.odd.reservation != "" {
		return p.odd.reservation
	}
	return p.reservation.String()
}

// seatNumber is positive(seatText()) without formatting the packed seat.
func (p *cachedPod) seatNumber() int {
	if p.odd != nil && p.odd.seat != "" {
		return positive(p.odd.seat)
	}
	return int(p.seat)
}

// createdTime and unschedulableSinceTime are the pod's times (zero: none).
func (p *cachedPod) createdTime() metav1.Time {
	if p.odd != nil && !p.odd.created.IsZero() {
		return p.odd.created
	}
	return unixTime(int64(p.created))
}

func (p *cachedPod) unschedulableSinceTime() metav1.Time {
	if p.odd != nil && !p.odd.unschedulableSince.IsZero() {
		return p.odd.unschedulableSince
	}
	return unixTime(int64(p.unschedulableSince))
}

// GetObjectMeta makes the ObjectMeta the informer reads through meta.Accessor: its
// store's keys and an update's resource versions. Only those fields: it is made for
// every event, and readers get PlacedPod values or pod().
func (p *cachedPod) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Name: p.name, Namespace: p.namespace(), UID: p.uid, ResourceVersion: p.resourceVersionText()}
}

// GetObjectKind implements runtime.Object: a cached pod is listed as one (pagedPodList).
func (p *cachedPod) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object. The handles and odd are shared values,
// never changed; only the deletion time is a pointer of its own.
func (p *cachedPod) DeepCopyObject() runtime.Object {
	c := *p
	c.deletion = p.deletion.DeepCopy()
	return &c
}

var controllerTrue = true

// pod returns a Pod holding what p kept, and nothing else, in storage of its own.
func (p *cachedPod) pod() *corev1.Pod {
	status := p.statusOf()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: p.name, Namespace: p.namespace(), UID: p.uid, ResourceVersion: p.resourceVersionText(),
			CreationTimestamp: p.createdTime(), DeletionTimestamp: p.deletion,
		},
		Spec:   corev1.PodSpec{NodeName: value(p.nodeName)},
		Status: corev1.PodStatus{Phase: status.phase},
	}
	if c, ok := p.controller(); ok {
		pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: c.apiVersion, Kind: c.kind, Name: c.name, UID: c.uid, Controller: &controllerTrue}}
	}
	placement := p.placementOf()
	pod.Annotations = make(map[string]string, len(cachedAnnotations))
	for _, kv := range [...][2]string{
		{strategy.AnnotationSeat, p.seatText()}, {strategy.AnnotationReservation, p.reservationText()},
		{strategy.AnnotationTerm, placement.term}, {strategy.AnnotationFallbackFrom, placement.fallbackFrom},
	} {
		if kv[1] != "" {
			pod.Annotations[kv[0]] = kv[1]
		}
	}
	if p.doNotDisrupt {
		pod.Annotations[karpv1.DoNotDisruptAnnotationKey] = "true"
	}
	if placement.nodeSelector != "" {
		pod.Spec.NodeSelector = map[string]string{}
		decodeSelector(placement.nodeSelector, pod.Spec.NodeSelector)
	}
	if p.ready {
		pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue})
	}
	if status.unschedulable != "" {
		pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: status.unschedulable, LastTransitionTime: p.unschedulableSinceTime()})
	}
	return pod
}

// podOf returns the pod a cache object or event is about (a deletion may come as a
// tombstone when the watch missed it), nil if it is no pod.
func podOf(obj any) *corev1.Pod {
	switch o := unwrap(obj).(type) {
	case *cachedPod:
		return o.pod()
	case *corev1.Pod:
		return o
	}
	return nil
}

// cachedAnnotations are the annotations of a placed pod that are read from the cache:
// the seat and term (ledger, convergence loop), the reservation the pod fulfils
// (ledger) and the term it fell back from (convergence loop). Karpenter's
// do-not-disrupt is kept as a bit (cachedPod.doNotDisrupt).
var cachedAnnotations = []string{strategy.AnnotationSeat, strategy.AnnotationTerm, strategy.AnnotationReservation, strategy.AnnotationFallbackFrom}

// trimPod keeps, in a cachedPod, what the ledger and the convergence loop read:
// identity, controller, the cachedAnnotations and do-not-disrupt, node name and selector (a few labels:
// the term it is on), phase, deletion, and whether it is Ready and since when it is
// unschedulable (the loop's readiness and stranded-pod checks); and its CPU and memory
// requests (serve's cost metrics). Everything else
// (labels, containers, env, volumes, managed fields, messages) is dropped. Anything but
// a *corev1.Pod (an object trimmed already) is returned as is.
func trimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	p := &cachedPod{name: pod.Name, uid: pod.UID, nodeName: handle(pod.Spec.NodeName), deletion: pod.DeletionTimestamp,
		doNotDisrupt: pod.Annotations[karpv1.DoNotDisruptAnnotationKey] == "true"}
	var odd oddPod
	var packed bool
	if p.resourceVersion, packed = packDecimal(pod.ResourceVersion, math.MaxUint64); !packed {
		odd.resourceVersion = pod.ResourceVersion
	}
	seat, packed := packDecimal(pod.Annotations[strategy.AnnotationSeat], math.MaxInt32)
	if packed {
		p.seat = int32(seat)
	} else {
		odd.seat = pod.Annotations[strategy.AnnotationSeat]
	}
	if id := pod.Annotations[strategy.AnnotationReservation]; id != "" {
		if p.reservation, packed = packUUID(id); !packed {
			odd.reservation = id
		}
	}
	if p.created, packed = packTime(pod.CreationTimestamp); !packed {
		odd.created = unixTime(pod.CreationTimestamp.Unix())
	}
	owner := podOwner{namespace: pod.Namespace}
	if ref := metav1.GetControllerOfNoCopy(pod); ref != nil {
		owner.controller, owner.hasController = podController{apiVersion: ref.APIVersion, kind: ref.Kind, name: ref.Name, uid: ref.UID}, true
	}
	p.owner = unique.Make(owner)
	placement := podPlacement{term: pod.Annotations[strategy.AnnotationTerm], fallbackFrom: pod.Annotations[strategy.AnnotationFallbackFrom]}
	placement.cannotRun = pod.Annotations[strategy.AnnotationCannotRun] != ""
	// A set term is patched as a required node affinity: kept in the selector's form.
	if sel := strategy.PlacementSelector(pod); len(sel) > 0 {
		placement.nodeSelector = encodeSelector(sel)
	}
	if placement != (podPlacement{}) {
		p.placement = unique.Make(placement)
	}
	status := podStatus{phase: pod.Status.Phase}
	for _, c := range pod.Status.Conditions {
		switch {
		case c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue:
			p.ready = true
		case c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse:
			status.unschedulable = c.Reason
			if p.unschedulableSince, packed = packTime(c.LastTransitionTime); !packed {
				odd.unschedulableSince = unixTime(c.LastTransitionTime.Unix())
			}
		}
	}
	if status != (podStatus{}) {
		p.status = unique.Make(status)
	}
	req := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{UseStatusResources: true})
	if r := (podRequests{cpuMilli: req.Cpu().MilliValue(), memoryBytes: req.Memory().Value()}); r != (podRequests{}) {
		p.requests = unique.Make(r)
	}
	if odd != (oddPod{}) {
		p.odd = &odd
	}
	return p, nil
}

// handle interns s (the zero handle for ""): the pods of a revision or a term share
// one copy of their common values, which Go's unique package keeps while some pod
// holds it.
func handle(s string) unique.Handle[string] {
	if s == "" {
		return unique.Handle[string]{}
	}
	return unique.Make(s)
}

// value is the string of h, "" for the zero handle.
func value(h unique.Handle[string]) string {
	if h == (unique.Handle[string]{}) {
		return ""
	}
	return h.Value()
}

// unixTime is the Time of Unix seconds s, the zero Time for 0.
func unixTime(s int64) metav1.Time {
	if s == 0 {
		return metav1.Time{}
	}
	return metav1.NewTime(time.Unix(s, 0))
}

// encodeSelector is a node selector as one comparable string, keys sorted, each key
// and value followed by a NUL (which no label key or value holds).
func encodeSelector(m map[string]string) string {
	keys := slices.Sorted(maps.Keys(m))
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(m[k])
		b.WriteByte(0)
	}
	return b.String()
}

// decodeSelector fills into, cleared first, from encodeSelector's form.
func decodeSelector(s string, into map[string]string) {
	clear(into)
	eachSelectorLabel(s, func(k, v string) bool {
		into[k] = v
		return true
	})
}

// eachSelectorLabel calls fn with each label of encodeSelector's form s, in order,
// until fn returns false.
func eachSelectorLabel(s string, fn func(k, v string) bool) {
	for s != "" {
		k, rest, _ := strings.Cut(s, "\x00")
		v, rest2, _ := strings.Cut(rest, "\x00")
		if !fn(k, v) {
			return
		}
		s = rest2
	}
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

// trimMeta drops managed fields and the last-applied copy from m: neither is read, and
// both can be larger than all the rest.
func trimMeta(m metav1.ObjectMeta) metav1.ObjectMeta {
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

// trimWorkload drops pod templates, managed fields and the last-applied copy from
// ReplicaSets, Deployments and StatefulSets (Jobs and CronJobs: trimJob, trimCronJob):
// only metadata (annotations, owners),
// replica counts, selectors (the convergence loop lists the pods admitted without a
// seat by them), the template's strategy annotations, and whether a StatefulSet rolls
// (its update strategy's type and its status's generation and revisions) are read.
func trimWorkload(obj any) (any, error) {
	switch o := obj.(type) {
	case *appsv1.ReplicaSet:
		return &appsv1.ReplicaSet{ObjectMeta: trimMeta(o.ObjectMeta), Spec: appsv1.ReplicaSetSpec{Replicas: o.Spec.Replicas, Selector: o.Spec.Selector, Template: templateAnnotations(o.Spec.Template)}}, nil
	case *appsv1.Deployment:
		return &appsv1.Deployment{ObjectMeta: trimMeta(o.ObjectMeta), Spec: appsv1.DeploymentSpec{Replicas: o.Spec.Replicas, Template: templateAnnotations(o.Spec.Template)}}, nil
	case *appsv1.StatefulSet:
		// The update strategy and the revisions in status say whether it is rolling.
		return &appsv1.StatefulSet{ObjectMeta: trimMeta(o.ObjectMeta),
			Spec: appsv1.StatefulSetSpec{Replicas: o.Spec.Replicas, Selector: o.Spec.Selector, Ordinals: o.Spec.Ordinals,
				UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: o.Spec.UpdateStrategy.Type}, Template: templateAnnotations(o.Spec.Template)},
			Status: appsv1.StatefulSetStatus{ObservedGeneration: o.Status.ObservedGeneration, CurrentRevision: o.Status.CurrentRevision, UpdateRevision: o.Status.UpdateRevision},
		}, nil
	case *batchv1.Job:
		return trimJob(o), nil
	case *batchv1.CronJob:
		return trimCronJob(o), nil
	}
	return obj, nil
}
