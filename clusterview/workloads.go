package clusterview

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	batchlisters "k8s.io/client-go/listers/batch/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/policy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// Workload is what a pod's seat is counted in: the object users annotate, and the
// revision whose pods share one seat sequence.
type Workload struct {
	// Ref names the object users see (the Deployment, Argo Rollout, StatefulSet or bare
	// ReplicaSet); Events go to it.
	Ref corev1.ObjectReference
	// Revision is the counting unit: the ReplicaSet UID (one Deployment or Rollout
	// revision) or the StatefulSet UID.
	Revision types.UID
	// Chain lists the workload objects after the pod, nearest first in lookup order:
	// a Deployment or Rollout before its ReplicaSet (a Deployment's annotations are
	// copied to it); then the policy that governs the workload and its namespace's
	// default (ListerResolver's Policies), so that walking it finds a strategy by the
	// one precedence rule.
	Chain []strategy.AnnotatedObject
	// StatefulSet is set for StatefulSet pods, whose seat is their ordinal + 1.
	StatefulSet *appsv1.StatefulSet
	// Job is set for a Job's pods (trimmed); an Indexed Job's pod's seat is its
	// completion index + 1.
	Job *batchv1.Job
	// Replicas is what the ReplicaSet wants (its spec.replicas; -1 for a StatefulSet or
	// when unset; a Job's running pods, JobReplicas).
	Replicas int
}

// OwnSeat returns the seat a pod of w names itself (a StatefulSet's ordinal, an Indexed
// Job's completion index); own is false when the ledger hands it out.
func (w *Workload) OwnSeat(pod *corev1.Pod) (seat int, own bool, err error) {
	switch {
	case w.StatefulSet != nil:
		seat, err = StatefulSetSeat(w.StatefulSet, pod)
		return seat, true, err
	case w.Job != nil && JobIndexed(w.Job):
		seat, err = JobSeat(w.Job, pod)
		return seat, true, err
	}
	return 0, false, nil
}

// Describe names the workload for messages, e.g. "Deployment shop/web".
func (w *Workload) Describe() string {
	return fmt.Sprintf("%s %s/%s", w.Ref.Kind, w.Ref.Namespace, w.Ref.Name)
}

// WorkloadResolver finds the workload behind a pod's controller reference.
type WorkloadResolver interface {
	Resolve(ctx context.Context, namespace string, owner *metav1.OwnerReference) (*Workload, error)
}

// The bounds of live lookups that serve gives ListerResolver: a real owner missing
// from the cache is rare (a new ReplicaSet, for milliseconds), so these only cap what
// forged reviews can cost the API server.
const (
	// LiveLookupQPS is the rate of the live lookups' own client (burst: twice it, plus one).
	LiveLookupQPS = 20
	// LiveLookups is how many live lookups run at once (LiveSlots' capacity).
	LiveLookups = 8
)

// ListerResolver resolves owners through informer listers and falls back to a live
// GET when the cache has not seen the object yet: a Deployment's new ReplicaSet creates
// its pods milliseconds after it is created itself.
//
// Live lookups are what a forged review naming an unknown ReplicaSet costs, so they are
// bounded: the cache gets CacheGrace to show the object first (a real owner appears
// there within milliseconds, a forged one never), at most LiveSlots lookups run at once
// (one more fails at once, the pod is admitted unplaced), and Client should be a client
// of its own with its own rate limit, so the informers, the ledger and Events never
// wait behind them.
type ListerResolver struct {
	Client       kubernetes.Interface
	ReplicaSets  appslisters.ReplicaSetLister
	Deployments  appslisters.DeploymentLister
	StatefulSets appslisters.StatefulSetLister
	// Jobs and CronJobs read batch workloads (nil: their pods are not placed).
	Jobs     batchlisters.JobLister
	CronJobs batchlisters.CronJobLister
	// CacheGrace is how long to wait for the cache before a live lookup (0: no wait).
	CacheGrace time.Duration
	// LiveSlots bounds concurrent live lookups (nil: unbounded); its capacity is the bound.
	LiveSlots chan struct{}
	// Policies appends a workload's policy and namespace-default links (nil: none).
	Policies PolicyLinks
	// rollouts reads Argo Rollouts (nil: not served; a ReplicaSet a Rollout controls
	// then counts as a bare ReplicaSet, as before Rollouts were supported). Set by
	// Caches.WatchRollouts, possibly while admissions run (the CRD installed later).
	rollouts atomic.Pointer[RolloutReader]
}

// PolicyLinks tells the strategy links that follow a workload's own annotations
// (policy.Cache).
type PolicyLinks interface {
	AppendLinks(dst []strategy.AnnotatedObject, w policy.Workload) []strategy.AnnotatedObject
}

// chain is the workload's links followed by its policy links, in one allocation.
func (r *ListerResolver) chain(ns, kind string, lbls map[string]string, own ...strategy.AnnotatedObject) []strategy.AnnotatedObject {
	c := make([]strategy.AnnotatedObject, 0, len(own)+2)
	c = append(c, own...)
	if r.Policies == nil {
		return c
	}
	return r.Policies.AppendLinks(c, policy.Workload{Namespace: ns, Kind: kind, Labels: lbls})
}

// Resolve implements WorkloadResolver for ReplicaSet, StatefulSet and Job owners.
func (r *ListerResolver) Resolve(ctx context.Context, ns string, owner *metav1.OwnerReference) (*Workload, error) {
	return r.ResolveRevision(ctx, ns, owner.Kind, owner.Name, owner.UID)
}

// ResolveRevision finds the workload of the revision kind ns/name (a ReplicaSet or a
// StatefulSet or a Job) whose UID is uid.
func (r *ListerResolver) ResolveRevision(ctx context.Context, ns, kind, name string, uid types.UID) (*Workload, error) {
	switch kind {
	case "ReplicaSet":
		rs, err := r.replicaSet(ctx, ns, name)
		if err != nil {
			return nil, err
		}
		if rs.UID != uid {
			return nil, fmt.Errorf("ReplicaSet %s/%s has UID %s, the pod names %s", ns, name, rs.UID, uid)
		}
		w := &Workload{Revision: rs.UID, Replicas: -1}
		if rs.Spec.Replicas != nil { // the API server defaults it; unset reads as unknown
			w.Replicas = int(*rs.Spec.Replicas)
		}
		rsObj := strategy.AnnotatedObject{Name: "ReplicaSet " + ns + "/" + rs.Name, Annotations: rs.Annotations}
		ctrl := metav1.GetControllerOf(rs)
		if ro := r.rollouts.Load(); ro != nil && IsRollout(ctrl) {
			return r.rolloutWorkload(ctx, ro, w, rsObj, ns, ctrl)
		}
		if ctrl != nil && ctrl.Kind == "Deployment" {
			dep, err := r.deployment(ctx, ns, ctrl.Name)
			if err != nil {
				return nil, err
			}
			w.Ref = objectRef("Deployment", dep.ObjectMeta)
			w.Chain = r.chain(ns, "Deployment", dep.Labels, strategy.AnnotatedObject{Name: w.Describe(), Annotations: dep.Annotations}, rsObj)
			return w, nil
		}
		w.Ref = objectRef("ReplicaSet", rs.ObjectMeta)
		w.Chain = r.chain(ns, "ReplicaSet", rs.Labels, rsObj)
		return w, nil
	case "StatefulSet":
		sts, err := r.statefulSet(ctx, ns, name)
		if err != nil {
			return nil, err
		}
		// A forged owner reference would otherwise let any pod creator pick its seat.
		if sts.UID != uid {
			return nil, fmt.Errorf("StatefulSet %s/%s has UID %s, the pod names %s", ns, name, sts.UID, uid)
		}
		w := &Workload{Revision: sts.UID, StatefulSet: sts, Ref: objectRef("StatefulSet", sts.ObjectMeta), Replicas: -1}
		w.Chain = r.chain(ns, "StatefulSet", sts.Labels, strategy.AnnotatedObject{Name: w.Describe(), Annotations: sts.Annotations})
		return w, nil
	case "Job":
		return r.jobWorkload(ctx, ns, name, uid)
	default:
		return nil, fmt.Errorf("pods owned by a %s are not placed (Deployment, Rollout, ReplicaSet, StatefulSet, Job and CronJob are)", kind)
	}
}

func (r *ListerResolver) replicaSet(ctx context.Context, ns, name string) (*appsv1.ReplicaSet, error) {
	return cachedOrLive(ctx, r, "ReplicaSet", ns, name, r.ReplicaSets.ReplicaSets(ns).Get, r.Client.AppsV1().ReplicaSets(ns).Get)
}

func (r *ListerResolver) deployment(ctx context.Context, ns, name string) (*appsv1.Deployment, error) {
	return cachedOrLive(ctx, r, "Deployment", ns, name, r.Deployments.Deployments(ns).Get, r.Client.AppsV1().Deployments(ns).Get)
}

func (r *ListerResolver) statefulSet(ctx context.Context, ns, name string) (*appsv1.StatefulSet, error) {
	return cachedOrLive(ctx, r, "StatefulSet", ns, name, r.StatefulSets.StatefulSets(ns).Get, r.Client.AppsV1().StatefulSets(ns).Get)
}

// cacheGracePoll is how often the cache is looked at again during CacheGrace.
const cacheGracePoll = 10 * time.Millisecond

// cachedOrLive reads an object from its lister, and from the API server when the cache
// has not seen it yet (within r.CacheGrace), bounded by r.LiveSlots.
func cachedOrLive[T any](ctx context.Context, r *ListerResolver, kind, ns, name string,
	cached func(name string) (T, error),
	live func(ctx context.Context, name string, opts metav1.GetOptions) (T, error),
) (T, error) {
	obj, err := cached(name)
	if err == nil {
		return obj, nil
	}
	if !apierrors.IsNotFound(err) {
		return obj, fmt.Errorf("get %s %s/%s from cache: %w", kind, ns, name, err)
	}
	if r.CacheGrace > 0 {
		deadline := time.NewTimer(r.CacheGrace)
		tick := time.NewTicker(cacheGracePoll)
		defer deadline.Stop()
		defer tick.Stop()
	wait:
		for {
			select {
			case <-ctx.Done():
				return obj, fmt.Errorf("get %s %s/%s: %w", kind, ns, name, ctx.Err())
			case <-deadline.C:
				break wait
			case <-tick.C:
				if obj, err = cached(name); err == nil {
					return obj, nil
				}
			}
		}
	}
	if r.LiveSlots != nil {
		select {
		case r.LiveSlots <- struct{}{}:
			defer func() { <-r.LiveSlots }()
		default:
			return obj, fmt.Errorf("get %s %s/%s: not in the cache, and %d live lookups are already running", kind, ns, name, cap(r.LiveSlots))
		}
	}
	if obj, err = live(ctx, name, metav1.GetOptions{}); err != nil {
		return obj, fmt.Errorf("get %s %s/%s: %w", kind, ns, name, err)
	}
	return obj, nil
}

func objectRef(kind string, m metav1.ObjectMeta) corev1.ObjectReference {
	return corev1.ObjectReference{APIVersion: "apps/v1", Kind: kind, Namespace: m.Namespace, Name: m.Name, UID: m.UID}
}

// StatefulSetSeat returns the seat of a StatefulSet pod: its ordinal + 1, counted from
// the set's first ordinal. The controller removes the highest ordinals first and
// replaces a pod under the same ordinal, so the seat sequence stays exact by itself.
func StatefulSetSeat(sts *appsv1.StatefulSet, pod *corev1.Pod) (int, error) {
	raw, ok := pod.Labels[appsv1.PodIndexLabel]
	if !ok {
		prefix := sts.Name + "-"
		if !strings.HasPrefix(pod.Name, prefix) {
			return 0, fmt.Errorf("StatefulSet pod %q has no %s label and its name has no ordinal", pod.Name, appsv1.PodIndexLabel)
		}
		raw = strings.TrimPrefix(pod.Name, prefix)
	}
	ordinal, err := strconv.Atoi(raw)
	if err != nil || ordinal < 0 {
		return 0, fmt.Errorf("StatefulSet pod %q: ordinal %q is not a non-negative integer", pod.Name, raw)
	}
	start := 0
	if sts.Spec.Ordinals != nil && sts.Spec.Ordinals.Start > 0 {
		start = int(sts.Spec.Ordinals.Start)
	}
	if ordinal < start {
		return 0, fmt.Errorf("StatefulSet pod %q: ordinal %d is below the set's start %d", pod.Name, ordinal, start)
	}
	// Compared before adding 1, so a huge label cannot overflow into a negative seat.
	if ordinal-start >= strategy.MaxSeat {
		return 0, fmt.Errorf("StatefulSet pod %q: ordinal %d gives seat %d or more; seats above %d are not placed", pod.Name, ordinal, int64(strategy.MaxSeat)+1, strategy.MaxSeat)
	}
	return ordinal - start + 1, nil
}
