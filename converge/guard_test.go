package converge

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// unplacedPod makes a Running pod of the revision admitted without a seat, created at
// created.
func unplacedPod(name string, created time.Time) *corev1.Pod {
	p := pod(9, 1, "", true, 0)
	p.Name, p.UID = name, types.UID("uid-"+name)
	p.CreationTimestamp = metav1.NewTime(created)
	delete(p.Labels, strategy.LabelManaged)
	p.Annotations, p.Spec.NodeSelector = nil, nil
	return p
}

// replaceUnplaced has every eviction delete the pod and the ReplicaSet recreate it, as
// the API server does when it never calls the webhook: the replacement is unplaced too.
func (w *world) replaceUnplaced(t *testing.T) *atomic.Int32 {
	t.Helper()
	var made atomic.Int32
	w.client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		name := a.(k8stesting.CreateAction).GetObject().(interface{ GetName() string }).GetName()
		w.mu.Lock()
		w.evicted = append(w.evicted, name)
		w.mu.Unlock()
		gvr := corev1.SchemeGroupVersion.WithResource("pods")
		if err := w.client.Tracker().Delete(gvr, ns, name); err != nil {
			return true, nil, err
		}
		n := made.Add(1)
		return true, nil, w.client.Tracker().Create(gvr, unplacedPod(fmt.Sprintf("web-again-%d", n), time.Now()), ns)
	})
	return &made
}

// A workload whose pods are admitted unplaced every time (a namespace the API server
// does not send, a webhook failing open): the loop moves one round, sees the
// replacements come back unplaced, and holds such moves, saying why; after the hold it
// moves one more round, then holds longer. Never round after round.
func TestUnplacedReplacementsAreHeld(t *testing.T) {
	w := newWorld(t, 2, []*corev1.Pod{pod(1, 1, "on-demand", true, 0), unplacedPod("web-unplaced", time.Now().Add(-time.Hour))})
	w.replaceUnplaced(t)
	recorder := record.NewFakeRecorder(100)
	w.loop.cfg.Recorder = recorder
	ctx := context.Background()
	key := revisionReason{rsUID, MoveUnplaced}
	passUntilHeld(t, w, key, 1)
	for range 5 {
		w.loop.Pass(ctx)
	}
	if got := w.evictions(); len(got) != 1 {
		t.Fatalf("evicted %v; want one round (1 pod), then a hold", got)
	}
	if n := testutil.ToFloat64(w.loop.cfg.Metrics.holds.WithLabelValues(MoveUnplaced)); n != 1 {
		t.Errorf("converge_holds_total{reason=unplaced} = %v, want 1", n)
	}
	if n := testutil.ToFloat64(w.loop.cfg.Metrics.held); n != 1 {
		t.Errorf("converge_held_workloads = %v, want 1", n)
	}
	if !eventSaid(recorder, ReasonConvergeHeld) {
		t.Errorf("no %s Event", ReasonConvergeHeld)
	}
	// The hold ends: one more round, then a longer hold.
	w.loop.mem.repeats[key].until = time.Now().Add(-time.Second)
	passUntilHeld(t, w, key, 2)
	if got := w.evictions(); len(got) != 2 {
		t.Fatalf("evicted %v; want one more round (1 pod) after the hold", got)
	}
	if r := w.loop.mem.repeats[key]; time.Until(r.until) < 30*time.Second {
		t.Fatalf("second hold until %v; want a longer one (40 s)", r.until)
	}
}

// passUntilHeld passes the loop until key's moves are held for the holds-th time in a
// row (bounded: the fake API server's watches deliver in their own time).
func passUntilHeld(t *testing.T, w *world, key revisionReason, holds int) {
	t.Helper()
	for range 200 {
		w.loop.Pass(context.Background())
		if r := w.loop.mem.repeats[key]; r != nil && r.holds == holds {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("moves for %s never held %d times; evicted %v", key.reason, holds, w.evictions())
}

// The loop never acts in a namespace the webhook's scope leaves out: its pods are all
// admitted unplaced, and would be evicted for ever.
func TestNamespaceOutOfScopeIsLeftAlone(t *testing.T) {
	w := newWorld(t, 2, []*corev1.Pod{pod(1, 1, "on-demand", true, 0), unplacedPod("web-unplaced", time.Now().Add(-time.Hour))})
	w.scope.leave(ns)
	for range 4 {
		w.loop.Pass(context.Background())
	}
	if got := w.evictions(); len(got) != 0 {
		t.Fatalf("evicted %v in a namespace out of scope", got)
	}
	for _, a := range w.client.Actions() {
		if l, ok := a.(k8stesting.ListAction); ok && a.GetResource().Resource == "pods" && !strings.Contains(l.GetListRestrictions().Labels.String(), strategy.LabelManaged+"=true") {
			t.Errorf("pods listed in a namespace out of scope: %v", l.GetListRestrictions().Labels)
		}
	}
}

// The cluster-wide cap holds whatever the workloads' own budgets allow.
func TestClusterWideEvictionCap(t *testing.T) {
	pods := []*corev1.Pod{pod(1, 1, "on-demand", true, 0)}
	for i := range 4 {
		p := unplacedPod(fmt.Sprintf("web-unplaced-%d", i), time.Now().Add(-time.Hour))
		p.Spec.NodeName, p.Status.Phase, p.Status.Conditions = "", corev1.PodPending, nil // no node: no budget cost
		pods = append(pods, p)
	}
	w := newWorld(t, 5, pods)
	w.loop.cfg.MaxEvictionsPerMinute = 2
	w.loop.evictions = rate.NewLimiter(rate.Limit(2.0/60), 2)
	for range 3 {
		w.loop.Pass(context.Background())
	}
	if got := w.evictions(); len(got) != 2 {
		t.Fatalf("evicted %v; want 2, the cluster-wide cap", got)
	}
	if n := testutil.ToFloat64(w.loop.cfg.Metrics.evictions.WithLabelValues(MoveUnplaced, "capped")); n < 1 {
		t.Errorf("converge_evictions_total{reason=unplaced,result=capped} = %v, want at least 1", n)
	}
}

func eventSaid(r *record.FakeRecorder, reason string) bool {
	for {
		select {
		case e := <-r.Events:
			if strings.Contains(e, reason) {
				return true
			}
		default:
			return false
		}
	}
}

func TestHoldsGrowToSixteenMinutes(t *testing.T) {
	want := []time.Duration{20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second, 320 * time.Second, 640 * time.Second, 16 * time.Minute, 16 * time.Minute}
	for i, w := range want {
		if got := holdFor(i + 1); got != w {
			t.Errorf("hold %d: %v, want %v", i+1, got, w)
		}
	}
}
