package clusterview

import (
	"context"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/metadata/metadatalister"
	"k8s.io/client-go/tools/cache"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/policy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// RolloutResource is policy.RolloutResource: a ReplicaSet a Rollout controls counts its
// seats as a Deployment's ReplicaSet does (one sequence per ReplicaSet).
var RolloutResource = policy.RolloutResource

// kindRollout is the Rollout's kind, in owner references and policies' spec.kinds.
const kindRollout = "Rollout"

// IsRollout reports whether ref names an Argo Rollout (policy.IsRollout).
func IsRollout(ref *metav1.OwnerReference) bool { return policy.IsRollout(ref) }

// RolloutReader reads Rollouts' metadata (labels and annotations are all placement
// reads of them): from a metadata-only informer, and from the API server when the
// informer has not seen one yet.
type RolloutReader struct {
	Lister metadatalister.Lister
	// Live gets what the cache has not seen; like ListerResolver.Client, a client of its
	// own.
	Live metadata.Interface
}

// OwnerError says that a ReplicaSet's controller (a Rollout) cannot be read: its
// workload, and so its strategy, is unknown. Admission says so in a warning even when
// the pod carries no strategy of its own, as one may well apply to it.
type OwnerError struct {
	// ReplicaSet and Owner name the objects, e.g. "ReplicaSet shop/web-1" and
	// "Rollout shop/web".
	ReplicaSet, Owner string
	Err               error
}

func (e *OwnerError) Error() string {
	return fmt.Sprintf("%s is controlled by %s, which cannot be read, so its strategy is unknown: %v", e.ReplicaSet, e.Owner, e.Err)
}

func (e *OwnerError) Unwrap() error { return e.Err }

// WatchRollouts adds a metadata-only informer of Rollouts to the caches (watch lists and
// watches, live gets what the cache has not seen yet) and has the resolver follow a
// ReplicaSet's Rollout. Call it only when policy.RolloutsServed: without it a ReplicaSet
// a Rollout controls counts as a bare ReplicaSet. Before Start, the informer starts with
// the others (and readiness waits for it); after Start (the CRD installed while the
// webhook runs, WatchRolloutsWhenServed) it starts at once, with the handlers
// OnRevisionChange registered, and the resolver reads Rollouts live until it has
// listed them. A second call does nothing.
func (c *Caches) WatchRollouts(watch, live metadata.Interface) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rolloutInformer != nil {
		return
	}
	factory := metadatainformer.NewSharedInformerFactoryWithOptions(watch, c.resync, metadatainformer.WithTransform(trimRollout))
	inf := factory.ForResource(RolloutResource).Informer()
	for _, h := range c.rolloutHandlers {
		// Only a stopped informer refuses a handler; this one has not started.
		_, _ = inf.AddEventHandlerWithResyncPeriod(h, 0)
	}
	c.rollouts, c.rolloutInformer = factory, inf
	c.Resolver.rollouts.Store(&RolloutReader{Lister: metadatalister.New(inf.GetIndexer(), RolloutResource), Live: live})
	if c.started != nil {
		factory.Start(c.started.Done())
	}
}

// WatchRolloutsWhenServed asks served (policy.RolloutsServed) every interval until the
// API server serves Rollouts, then watches them (WatchRollouts): Argo Rollouts installed
// after the webhook started is followed without a restart. Each look is one GET of the
// group version's discovery document (a 404 while Argo Rollouts is not installed);
// once found, nothing more. It returns when found or when ctx ends.
func (c *Caches) WatchRolloutsWhenServed(ctx context.Context, served func() (bool, error), interval time.Duration, watch, live metadata.Interface, log logrus.FieldLogger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ok, err := served()
		switch {
		case err != nil:
			if !failing { // once per outage, not once per look
				log.WithError(err).Warnf("cannot tell whether %s is served yet; looking again every %s", RolloutResource.GroupResource(), interval)
			}
			failing = true
		case ok:
			c.WatchRollouts(watch, live)
			log.Infof("%s is served now: following the ReplicaSets of Argo Rollouts", RolloutResource.GroupResource())
			return
		default:
			failing = false
		}
	}
}

// FollowsRollouts reports whether a ReplicaSet's Argo Rollout is followed (the API
// server serves Rollouts, and the caches watch them).
func (r *ListerResolver) FollowsRollouts() bool { return r.rollouts.Load() != nil }

// trimRollout keeps a Rollout's metadata without managed fields and the last-applied
// copy (a Rollout's spec holds a whole pod template).
func trimRollout(obj any) (any, error) {
	if o, ok := obj.(*metav1.PartialObjectMetadata); ok {
		return &metav1.PartialObjectMetadata{TypeMeta: o.TypeMeta, ObjectMeta: trimMeta(o.ObjectMeta)}, nil
	}
	return obj, nil
}

// rollout reads Rollout ns/name through the cache, then live.
func (r *ListerResolver) rollout(ctx context.Context, ro *RolloutReader, ns, name string) (*metav1.PartialObjectMetadata, error) {
	live := func(ctx context.Context, name string, opts metav1.GetOptions) (*metav1.PartialObjectMetadata, error) {
		return ro.Live.Resource(RolloutResource).Namespace(ns).Get(ctx, name, opts)
	}
	return cachedOrLive(ctx, r, kindRollout, ns, name, ro.Lister.Namespace(ns).Get, live)
}

// rolloutWorkload is the workload of ReplicaSet rs that Rollout ref controls: the
// Rollout is what users see, its annotations come before the ReplicaSet's, and
// policies select it by kind Rollout and its own labels.
func (r *ListerResolver) rolloutWorkload(ctx context.Context, reader *RolloutReader, w *Workload, rsObj strategy.AnnotatedObject, ns string, ref *metav1.OwnerReference) (*Workload, error) {
	ro, err := r.rollout(ctx, reader, ns, ref.Name)
	if err == nil && ro.UID != ref.UID {
		err = fmt.Errorf("Rollout %s/%s has UID %s, the ReplicaSet names %s", ns, ref.Name, ro.UID, ref.UID)
	}
	if err != nil {
		return nil, &OwnerError{ReplicaSet: rsObj.Name, Owner: kindRollout + " " + ns + "/" + ref.Name, Err: err}
	}
	w.Ref = corev1.ObjectReference{APIVersion: RolloutResource.GroupVersion().String(), Kind: kindRollout,
		Namespace: ro.Namespace, Name: ro.Name, UID: ro.UID}
	w.Chain = r.chain(ns, kindRollout, ro.Labels, strategy.AnnotatedObject{Name: w.Describe(), Annotations: ro.Annotations}, rsObj)
	return w, nil
}

// Rollouts returns the cached Rollouts (metadata only); none when they are not watched.
func (c *Caches) Rollouts() []*metav1.PartialObjectMetadata {
	inf := c.rolloutInf()
	if inf == nil {
		return nil
	}
	objs := inf.GetStore().List()
	out := make([]*metav1.PartialObjectMetadata, 0, len(objs))
	for _, o := range objs {
		if ro, ok := o.(*metav1.PartialObjectMetadata); ok {
			out = append(out, ro)
		}
	}
	return out
}

// rolloutSynced is the Rollout informer's HasSynced; always true when not watched.
func (c *Caches) rolloutSynced() bool {
	inf := c.rolloutInf()
	return inf == nil || inf.HasSynced()
}

// rolloutInf is the Rollout informer (nil: not watched).
func (c *Caches) rolloutInf() cache.SharedIndexInformer {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rolloutInformer
}
