//go:build e2e

package e2e

// The churn soak's watch on its pods and workloads, and the invariants it serves: the
// loop's evictions stay within each workload's budget (checkEvictionBudget), and no pod
// of the namespace that is not enabled is ever replaced.

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/converge"
)

// podSeen is what the soak's watch saw of one pod.
type podSeen struct {
	name, workload, revision string
	created                  time.Time
	// readySince is the Ready condition's lastTransitionTime (kwok's clock, whole seconds)
	// as last seen while the pod was Running and Ready on a node and not terminating;
	// zero when it was not then.
	readySince time.Time
}

// soakWatch records the soak namespace's pods, and when its ReplicaSets and StatefulSet
// were seen to lower their replicas (a scale-down, a rollout).
type soakWatch struct {
	stop chan struct{}

	mu        sync.Mutex
	pods      map[types.UID]*podSeen
	replicas  map[types.UID]int32
	decreases []workloadChange // To: when the watch saw it
}

func startSoakWatch(ctx context.Context, ns string) (*soakWatch, error) {
	w := &soakWatch{stop: make(chan struct{}), pods: map[types.UID]*podSeen{}, replicas: map[types.UID]int32{}}
	f := informers.NewSharedInformerFactoryWithOptions(env.client, 0, informers.WithNamespace(ns))
	handlers := []struct {
		informer cache.SharedIndexInformer
		seen     func(any)
	}{
		{f.Core().V1().Pods().Informer(), w.pod},
		{f.Apps().V1().ReplicaSets().Informer(), func(o any) {
			if rs, ok := o.(*appsv1.ReplicaSet); ok && rs.Spec.Replicas != nil {
				w.scaled(rs.UID, rs.Labels["app"], *rs.Spec.Replicas)
			}
		}},
		{f.Apps().V1().StatefulSets().Informer(), func(o any) {
			if sts, ok := o.(*appsv1.StatefulSet); ok && sts.Spec.Replicas != nil {
				w.scaled(sts.UID, sts.Name, *sts.Spec.Replicas)
			}
		}},
	}
	for _, h := range handlers {
		if _, err := h.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: h.seen, UpdateFunc: func(_, o any) { h.seen(o) },
		}); err != nil {
			return nil, err
		}
	}
	f.Start(w.stop)
	for typ, ok := range f.WaitForCacheSync(w.stop) {
		if !ok {
			w.Stop()
			return nil, fmt.Errorf("watching %v in %s: cache not synced", typ, ns)
		}
	}
	return w, ctx.Err()
}

func (w *soakWatch) Stop() { close(w.stop) }

func (w *soakWatch) pod(o any) {
	p, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	seen := w.pods[p.UID]
	if seen == nil {
		app := p.Labels["app"]
		seen = &podSeen{name: p.Name, workload: app, created: p.CreationTimestamp.Time,
			revision: app + "@" + p.Labels[appsv1.DefaultDeploymentUniqueLabelKey] + p.Labels[appsv1.ControllerRevisionHashLabelKey]}
		w.pods[p.UID] = seen
	}
	if p.DeletionTimestamp != nil {
		return // its state when it was evicted or deleted is kept
	}
	seen.readySince = time.Time{}
	if p.Spec.NodeName == "" || p.Status.Phase != corev1.PodRunning {
		return
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			seen.readySince = c.LastTransitionTime.Time
		}
	}
}

func (w *soakWatch) scaled(uid types.UID, workload string, replicas int32) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if old, ok := w.replicas[uid]; ok && replicas < old {
		w.decreases = append(w.decreases, workloadChange{Workload: workload, To: time.Now()})
	}
	w.replicas[uid] = replicas
}

// noteChange records an operation of the soak on workload, from its start to now.
func (s *soak) noteChange(workload string, from time.Time) {
	s.changes = append(s.changes, workloadChange{Workload: workload, From: from, To: time.Now()})
}

// checkEvictionBudget holds the loop's evictions in the soak's namespace (the API
// server's audit log) against each workload's budget: see checkEvictionBudget.
func (s *soak) checkEvictionBudget() {
	s.watch.mu.Lock()
	pods := map[types.UID]podSeen{}
	for uid, p := range s.watch.pods {
		pods[uid] = *p
	}
	changes := append([]workloadChange(nil), s.changes...)
	// A ReplicaSet or the StatefulSet lowered its replicas after an operation of the
	// soak started (the operation is what lowered them) and before the watch saw it.
	for _, d := range s.watch.decreases {
		for _, c := range s.changes {
			if c.Workload == d.Workload && !c.From.After(d.To) && (d.From.IsZero() || c.From.After(d.From)) {
				d.From = c.From
			}
		}
		changes = append(changes, d) // From zero when no operation came before: lenient
	}
	s.watch.mu.Unlock()

	var evictions []loopEviction
	unknown := 0
	for _, a := range auditEvictionsOf(s.t, s.ns) {
		// The pod the eviction names by its UID (the loop's do); else the pod of that name
		// created last by then (a StatefulSet's names come back).
		uid := a.UID
		for id, p := range pods {
			if a.UID == "" && p.name == a.Pod && !p.created.After(a.At) && (uid == "" || p.created.After(pods[uid].created)) {
				uid = id
			}
		}
		p, ok := pods[uid]
		if !ok {
			unknown++ // not seen by the watch: counted as costing nothing
			p = podSeen{name: a.Pod, workload: "?", revision: "?"}
		}
		evictions = append(evictions, loopEviction{ID: string(uid), Pod: a.Pod, Workload: p.workload, Revision: p.revision, At: a.At, ReadySince: p.readySince})
	}
	var ready []readyPod
	for uid, p := range pods {
		if !p.readySince.IsZero() {
			ready = append(ready, readyPod{ID: string(uid), Revision: p.revision, Ready: p.readySince})
		}
	}
	sort.Slice(ready, func(i, j int) bool { return ready[i].Ready.Before(ready[j].Ready) })
	// The soak's replicas run with the default CONVERGE_MAX_UNAVAILABLE; the most replicas
	// the workload was given gives the largest budget it had.
	budget := func(workload string) int {
		b, err := converge.Budget(intstr.FromString(""), s.maxReplicas[workload])
		if err != nil {
			s.t.Fatal(err)
		}
		return b
	}
	uses, over := checkEvictionBudget(evictions, ready, changes, budget)
	for _, line := range over {
		s.violate("eviction budget", "no Ready pod evicted beyond its workload's budget (CONVERGE_MAX_UNAVAILABLE)", line)
	}
	s.budget = budgetSummary(uses, evictions, unknown)
}

// budgetSummary says per workload how many of its pods the loop evicted, how many of
// them were Ready, and the most evictions of Ready pods in flight at once against its
// budget; and the most evictions in any minute, against MAX_EVICTIONS_PER_MINUTE.
func budgetSummary(uses map[string]*budgetUse, evictions []loopEviction, unknown int) string {
	type total struct{ evictions, costly, inFlight, budget int }
	byWorkload := map[string]*total{}
	for rev, u := range uses {
		name, _, _ := strings.Cut(rev, "@")
		t := byWorkload[name]
		if t == nil {
			t = &total{}
			byWorkload[name] = t
		}
		t.evictions += u.Evictions
		t.costly += u.Costly
		t.inFlight = max(t.inFlight, u.MaxInFlight)
		t.budget = max(t.budget, u.Budget)
	}
	var names []string
	for name := range byWorkload {
		names = append(names, name)
	}
	sort.Strings(names)
	var parts []string
	for _, name := range names {
		t := byWorkload[name]
		parts = append(parts, fmt.Sprintf("%s %d (%d Ready, at most %d in flight, budget %d)", name, t.evictions, t.costly, t.inFlight, t.budget))
	}
	perMinute := 0
	for i := range evictions {
		n := 0
		for j := i; j < len(evictions) && evictions[j].At.Sub(evictions[i].At) < time.Minute; j++ {
			n++
		}
		perMinute = max(perMinute, n)
	}
	out := fmt.Sprintf("%d; per workload: %s; at most %d in a minute (MAX_EVICTIONS_PER_MINUTE 30)", len(evictions), strings.Join(parts, ", "), perMinute)
	if unknown > 0 {
		out += fmt.Sprintf("; %d of pods the watch did not see", unknown)
	}
	return out
}

// outsidePods returns the UIDs and names of the pods in the namespace that is not
// enabled.
func (s *soak) outsidePods(ctx context.Context) (map[types.UID]string, error) {
	list, err := env.client.CoreV1().Pods(s.outside).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[types.UID]string{}
	for _, p := range list.Items {
		out[p.UID] = p.Name
	}
	return out, nil
}

// checkOutside checks that the pods of the namespace that is not enabled are still the
// ones seen at the start: none was ever replaced.
func (s *soak) checkOutside(ctx context.Context) {
	now, err := s.outsidePods(ctx)
	if err != nil {
		s.t.Errorf("listing the pods of %s: %v", s.outside, err)
		return
	}
	var gone, replaced []string
	for uid, name := range s.outsideStart {
		if _, ok := now[uid]; !ok {
			gone = append(gone, name)
		}
	}
	for uid, name := range now {
		if _, ok := s.outsideStart[uid]; !ok {
			replaced = append(replaced, name)
		}
	}
	if len(gone) > 0 || len(replaced) > 0 {
		sort.Strings(gone)
		sort.Strings(replaced)
		s.violate("namespace "+s.outside+" (not enabled)", fmt.Sprintf("its %d pods of the start, none replaced", len(s.outsideStart)),
			fmt.Sprintf("gone %v, new %v", gone, replaced))
	}
}
