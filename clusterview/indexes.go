package clusterview

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// Indexes of the workload informers: by an object's own UID (a revision is looked up
// by the UID its pods and records name) and, for ReplicaSets, by their controller's
// UID (the revisions of one Deployment or Rollout).
const (
	uidIndex        = "uid"
	controllerIndex = "controller-uid"
)

func indexByUID(obj any) ([]string, error) {
	if o, ok := obj.(metav1.Object); ok {
		return []string{string(o.GetUID())}, nil
	}
	return nil, nil
}

func indexByControllerUID(obj any) ([]string, error) {
	if o, ok := obj.(metav1.Object); ok {
		if ref := metav1.GetControllerOfNoCopy(o); ref != nil {
			return []string{string(ref.UID)}, nil
		}
	}
	return nil, nil
}

// addWorkloadIndexers indexes ReplicaSets by UID and controller UID, StatefulSets by
// UID, Jobs by UID; call before the informers start.
func (c *Caches) addWorkloadIndexers() error {
	apps := c.workloads.Apps().V1()
	if err := apps.ReplicaSets().Informer().AddIndexers(cache.Indexers{uidIndex: indexByUID, controllerIndex: indexByControllerUID}); err != nil {
		return fmt.Errorf("add ReplicaSet indexes: %w", err)
	}
	if err := apps.StatefulSets().Informer().AddIndexers(cache.Indexers{uidIndex: indexByUID}); err != nil {
		return fmt.Errorf("add StatefulSet indexes: %w", err)
	}
	if err := c.workloads.Batch().V1().Jobs().Informer().AddIndexers(cache.Indexers{uidIndex: indexByUID}); err != nil {
		return fmt.Errorf("add Job indexes: %w", err)
	}
	// Listed so that the factory starts it: the resolver reads a CronJob's annotations.
	_ = c.workloads.Batch().V1().CronJobs().Informer()
	return nil
}

// ReplicaSetByUID returns the cached ReplicaSet with uid (trimmed: see trimWorkload).
func (c *Caches) ReplicaSetByUID(uid types.UID) (*appsv1.ReplicaSet, bool) {
	return byUID[*appsv1.ReplicaSet](c.workloads.Apps().V1().ReplicaSets().Informer().GetIndexer(), uid)
}

// StatefulSetByUID returns the cached StatefulSet with uid (trimmed: see trimWorkload).
func (c *Caches) StatefulSetByUID(uid types.UID) (*appsv1.StatefulSet, bool) {
	return byUID[*appsv1.StatefulSet](c.workloads.Apps().V1().StatefulSets().Informer().GetIndexer(), uid)
}

// JobByUID returns the cached Job with uid (trimmed: see trimJob).
func (c *Caches) JobByUID(uid types.UID) (*batchv1.Job, bool) {
	return byUID[*batchv1.Job](c.workloads.Batch().V1().Jobs().Informer().GetIndexer(), uid)
}

func byUID[T any](idx cache.Indexer, uid types.UID) (T, bool) {
	var zero T
	objs, err := idx.ByIndex(uidIndex, string(uid))
	if err != nil || len(objs) == 0 {
		return zero, false
	}
	o, ok := objs[0].(T)
	return o, ok
}

// ReplicaSetsOf returns the cached ReplicaSets a Deployment or Rollout (by UID)
// controls.
func (c *Caches) ReplicaSetsOf(deployment types.UID) []*appsv1.ReplicaSet {
	objs, err := c.workloads.Apps().V1().ReplicaSets().Informer().GetIndexer().ByIndex(controllerIndex, string(deployment))
	if err != nil {
		return nil
	}
	out := make([]*appsv1.ReplicaSet, 0, len(objs))
	for _, o := range objs {
		if rs, ok := o.(*appsv1.ReplicaSet); ok {
			out = append(out, rs)
		}
	}
	return out
}

// OnRevisionChange calls changed with the UID of each revision (a ReplicaSet, a
// StatefulSet or a Job) whose cached state changed: one of its placed pods, itself, or, for a
// Deployment's or Rollout's ReplicaSets, the Deployment or Rollout or a sibling
// ReplicaSet (a rollout moves replicas between them; the owner holds the strategy). A revision's UID may be
// one that is gone. The handlers take no resyncs (period 0): those change nothing.
//
// changed runs on the informers' goroutines: it must be quick (queue the UID). The
// returned function reports whether changed has been called for every object of the
// informers' initial lists.
func (c *Caches) OnRevisionChange(changed func(uid types.UID)) (cache.InformerSynced, error) {
	ownerChanged := func(uid types.UID) {
		for _, rs := range c.ReplicaSetsOf(uid) {
			changed(rs.UID)
		}
	}
	ownerObjectChanged := func(obj any) {
		if o, ok := unwrap(obj).(metav1.Object); ok {
			ownerChanged(o.GetUID())
		}
	}
	podChanged := func(obj any) {
		if p, ok := unwrap(obj).(*cachedPod); ok {
			if c, ok := p.controller(); ok {
				changed(c.uid)
			}
		}
	}
	revisionChanged := func(obj any) {
		o, ok := unwrap(obj).(metav1.Object)
		if !ok {
			return
		}
		changed(o.GetUID())
		if ref := metav1.GetControllerOfNoCopy(o); ref != nil && (ref.Kind == "Deployment" || IsRollout(ref)) {
			ownerChanged(ref.UID)
		}
	}
	apps := c.workloads.Apps().V1()
	type watched struct {
		name     string
		informer cache.SharedIndexInformer
		changed  func(obj any)
	}
	handlers := []watched{
		{"pods", c.pods.Core().V1().Pods().Informer(), podChanged},
		{"ReplicaSets", apps.ReplicaSets().Informer(), revisionChanged},
		{"StatefulSets", apps.StatefulSets().Informer(), revisionChanged},
		{"Jobs", c.workloads.Batch().V1().Jobs().Informer(), revisionChanged},
		{"Deployments", apps.Deployments().Informer(), ownerObjectChanged},
	}
	handlerOf := func(changed func(obj any)) cache.ResourceEventHandler {
		return cache.ResourceEventHandlerFuncs{
			AddFunc:    changed,
			UpdateFunc: func(_, obj any) { changed(obj) },
			DeleteFunc: changed,
		}
	}
	c.mu.Lock()
	if c.rolloutInformer != nil {
		handlers = append(handlers, watched{"Rollouts", c.rolloutInformer, ownerObjectChanged})
	} else {
		// Rollouts watched later (WatchRollouts after Start) get the handler then.
		c.rolloutHandlers = append(c.rolloutHandlers, handlerOf(ownerObjectChanged))
	}
	c.mu.Unlock()
	var synced []cache.InformerSynced
	for _, h := range handlers {
		reg, err := h.informer.AddEventHandlerWithResyncPeriod(handlerOf(h.changed), 0)
		if err != nil {
			return nil, fmt.Errorf("watch %s for changed revisions: %w", h.name, err)
		}
		synced = append(synced, reg.HasSynced)
	}
	return func() bool {
		for _, s := range synced {
			if !s() {
				return false
			}
		}
		return true
	}, nil
}

// unwrap returns the object of a deletion the watch missed (a tombstone), else obj.
func unwrap(obj any) any {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return tomb.Obj
	}
	return obj
}
