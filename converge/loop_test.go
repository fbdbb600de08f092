package converge

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/karpenter"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/unavailability"
)

func TestBudget(t *testing.T) {
	tests := []struct {
		max      string
		replicas int
		want     int
		wantErr  bool
	}{
		{"", 12, 1, false}, // default 10%: 1.2 rounds down to 1
		{"", 5, 1, false},  // at least one pod, or nothing could ever move
		{"", 30, 3, false},
		{"10%", 100, 10, false},
		{"25%", 10, 2, false},
		{"2", 12, 2, false},
		{"0", 12, 1, false},
		{"x", 12, 0, true},
		{"-1", 12, 0, true},
	}
	for _, tc := range tests {
		got, err := Budget(intstr.Parse(tc.max), tc.replicas)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("Budget(%q, %d) = %d, %v; want %d, error %v", tc.max, tc.replicas, got, err, tc.want, tc.wantErr)
		}
	}
}

const (
	ns     = "shop"
	rsUID  = types.UID("rs-1")
	depUID = types.UID("dep-1")
	strat  = "karpenter.sh/capacity-type=on-demand,base=1:karpenter.sh/capacity-type=spot,weight=3"
)

// world is a fake API server with a Deployment of replicas pods of strat, whose pods
// the test makes, and a loop over it; evictions are recorded (or refused with 429).
type world struct {
	client  *fake.Clientset
	scope   *testScope
	loop    *Loop
	records *unavailability.Records
	mu      sync.Mutex
	evicted []string
	refuse  bool
}

func newWorld(t *testing.T, replicas int, pods []*corev1.Pod) *world {
	t.Helper()
	return newWorldOf(t, strat, replicas, pods)
}

// newWorldOf is newWorld with another strategy on the Deployment.
func newWorldOf(t *testing.T, strat string, replicas int, pods []*corev1.Pod) *world {
	t.Helper()
	built := time.Now() // the pods' ages count from about now
	ann := map[string]string{strategy.AnnotationStrategy: strat}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns, UID: depUID, Annotations: map[string]string{"deployment.kubernetes.io/revision": "1"}}}
	dep.Spec.Template.Annotations = ann
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{
		Name: "web-1", Namespace: ns, UID: rsUID, Annotations: map[string]string{"deployment.kubernetes.io/revision": "1"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: depUID, Controller: ptr(true)}},
	}}
	rs.Spec.Replicas = ptr(int32(replicas))
	rs.Spec.Template.Annotations = ann
	rs.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	objs := []runtime.Object{dep, rs}
	for _, p := range pods {
		objs = append(objs, p)
	}
	w := &world{client: fake.NewClientset(objs...), scope: &testScope{out: map[string]bool{}}}
	w.client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.refuse {
			return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 10)
		}
		name := a.(k8stesting.CreateAction).GetObject().(interface{ GetName() string }).GetName()
		w.evicted = append(w.evicted, name)
		return true, nil, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	caches, err := clusterview.NewCaches(w.client, 0)
	if err != nil {
		t.Fatal(err)
	}
	caches.Start(ctx)
	if err := caches.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	w.records = unavailability.NewRecords(w.client, "cksw")
	w.records.Start(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), w.records.HasSynced) {
		t.Fatal("records did not sync")
	}
	m, err := NewMetrics(prometheus.NewRegistry(), "test")
	if err != nil {
		t.Fatal(err)
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	w.loop, err = NewLoop(Config{
		Client: w.client, Caches: caches, Records: w.records, Metrics: m, Log: log, Scope: w.scope,
		// FALLBACK_AFTER 20 s from when the pods were built: the informers' start, 15 s on
		// a loaded machine, must not age a pod built 5 s unschedulable into a stranded one.
		Settings: Settings{FallbackAfter: 20*time.Second + time.Since(built), Cooldown: time.Minute},
	})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// testScope covers every namespace but those in out.
type testScope struct {
	mu  sync.Mutex
	out map[string]bool
}

func (s *testScope) CoversNamespace(ns string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.out[ns]
}

func (s *testScope) CoversPod(ns string, _ map[string]string) bool { return s.CoversNamespace(ns) }

func (s *testScope) leave(ns string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.out[ns] = true
}

func (w *world) evictions() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.evicted...)
}

func ptr[T any](v T) *T { return &v }

// fallbackPods makes n Ready on-demand pods: seat 1 on its own term, seats 2..n placed
// there as the fallback of term 2 (spot), as after a cool-down, ready to move back.
func fallbackPods(n int) []*corev1.Pod {
	pods := []*corev1.Pod{pod(1, 1, "on-demand", true, 0)}
	for seat := 2; seat <= n; seat++ {
		p := pod(seat, 1, "on-demand", true, 0)
		p.Annotations[strategy.AnnotationFallbackFrom] = "2"
		pods = append(pods, p)
	}
	return pods
}

// record reads and decodes the revision's unavailability record from the API server;
// the test fails, saying why it expected one, when there is none.
func (w *world) record(t *testing.T, why string) *unavailability.Record {
	t.Helper()
	lease, err := w.client.CoordinationV1().Leases("cksw").Get(context.Background(), unavailability.RecordName(rsUID), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("%s: %v", why, err)
	}
	rec, err := unavailability.DecodeRecord(lease)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// pod makes a placed pod of seat on term (1-based) with capacity type ct.
func pod(seat, term int, ct string, ready bool, unschedulableFor time.Duration) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: fmt.Sprintf("web-%d", seat), Namespace: ns, UID: types.UID(fmt.Sprintf("pod-%d", seat)),
		Labels:          map[string]string{"app": "web", strategy.LabelManaged: "true"},
		Annotations:     map[string]string{strategy.AnnotationSeat: strconv.Itoa(seat), strategy.AnnotationTerm: strconv.Itoa(term)},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", UID: rsUID, Controller: ptr(true)}},
	}}
	p.Spec.NodeSelector = map[string]string{"karpenter.sh/capacity-type": ct}
	switch {
	case ready:
		p.Spec.NodeName = "node"
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	default:
		p.Status.Phase = corev1.PodPending
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
			LastTransitionTime: metav1.NewTime(time.Now().Add(-unschedulableFor))}}
	}
	return p
}

// waitingOnSpot returns the pods of replicas seats: seat 1 Running on on-demand, the
// others Pending on spot, unschedulable for unschedulableFor.
func waitingOnSpot(replicas int, unschedulableFor time.Duration) []*corev1.Pod {
	pods := []*corev1.Pod{pod(1, 1, "on-demand", true, 0)}
	for seat := 2; seat <= replicas; seat++ {
		pods = append(pods, pod(seat, 2, "spot", false, unschedulableFor))
	}
	return pods
}

// Pods Pending and unschedulable past FALLBACK_AFTER mark their term unavailable (a
// record in the API server); the next pass evicts them, at no budget cost since they
// are unavailable anyway. Younger ones mark nothing.
func TestStrandedTermDetectedAndEvicted(t *testing.T) {
	pods := waitingOnSpot(5, 30*time.Second)
	w := newWorld(t, 5, pods)
	ctx := context.Background()
	w.loop.Pass(ctx)
	rec := w.record(t, "no unavailability record")
	st, ok := rec.Terms[1]
	if !ok || st.Strikes != 1 || time.Until(st.Until) < 50*time.Second || rec.Workload != "Deployment shop/web" {
		t.Fatalf("record %+v, want term 2 unavailable for the cool-down, one strike", rec)
	}
	if got := w.evictions(); len(got) != 0 {
		t.Fatalf("evicted %v in the pass that marked the term; replicas must see the record first", got)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return w.records.Get(rsUID) != nil, nil
	}); err != nil {
		t.Fatal("the record never reached the informer")
	}
	if got := w.records.Unavailable(rsUID); len(got) != 1 || got[1] == "" {
		t.Fatalf("Unavailable = %v, want term index 1", got)
	}
	w.loop.Pass(ctx)
	if got := w.evictions(); len(got) != 4 {
		t.Fatalf("evicted %v, want the 4 stranded pods", got)
	}
}

func TestYoungPendingPodsMarkNothing(t *testing.T) {
	w := newWorld(t, 2, []*corev1.Pod{pod(1, 1, "on-demand", true, 0), pod(2, 2, "spot", false, 5*time.Second)})
	w.loop.Pass(context.Background())
	if _, err := w.client.CoordinationV1().Leases("cksw").Get(context.Background(), unavailability.RecordName(rsUID), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a pod unschedulable for 5s (FALLBACK_AFTER 20s) marked its term: %v", err)
	}
}

// Once the cool-down is over, fallback pods move back one at a time: with 12 replicas
// the budget is 1 pod, and a pod that is moving counts against it.
func TestReturnWithinBudget(t *testing.T) {
	pods := fallbackPods(12)
	w := newWorld(t, 12, pods)
	ctx := context.Background()
	w.loop.Pass(ctx)
	got := w.evictions()
	if len(got) != 1 || got[0] != "web-12" {
		t.Fatalf("evicted %v, want only the highest seat (budget 1)", got)
	}
	// The evicted pod has not gone from the cache yet: it still counts as unavailable.
	w.loop.Pass(ctx)
	if got := w.evictions(); len(got) != 1 {
		t.Fatalf("evicted %v while one pod was moving, budget 1", got)
	}
}

// A PodDisruptionBudget's 429 leaves the pod for a later pass.
func TestEvictionRefusedByPDB(t *testing.T) {
	p := pod(2, 1, "on-demand", true, 0)
	p.Annotations[strategy.AnnotationFallbackFrom] = "2"
	w := newWorld(t, 2, []*corev1.Pod{pod(1, 1, "on-demand", true, 0), p})
	w.refuse = true
	ctx := context.Background()
	rev := w.loop.revisions()
	if len(rev) != 1 {
		t.Fatalf("revisions %v", rev)
	}
	res := w.loop.converge(ctx, rev[0], time.Now())
	if res.pending != 1 || len(w.evictions()) != 0 {
		t.Fatalf("pending %d, evicted %v; want the refused move pending", res.pending, w.evictions())
	}
}

// The opt-out annotation keeps every pod where it is.
func TestOptOut(t *testing.T) {
	p := pod(2, 1, "on-demand", true, 0)
	p.Annotations[strategy.AnnotationFallbackFrom] = "2"
	w := newWorld(t, 2, []*corev1.Pod{pod(1, 1, "on-demand", true, 0), p})
	ctx := context.Background()
	d, _ := w.client.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
	d.Annotations[strategy.AnnotationConverge] = "false"
	if _, err := w.client.AppsV1().Deployments(ns).Update(ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		d, err := w.loop.cfg.Caches.Resolver.Deployments.Deployments(ns).Get("web")
		return err == nil && d.Annotations[strategy.AnnotationConverge] == "false", nil
	}); err != nil {
		t.Fatal(err)
	}
	w.loop.Pass(ctx)
	if got := w.evictions(); len(got) != 0 {
		t.Fatalf("evicted %v from an opted-out workload", got)
	}
}

// A seat above the replica count while a lower seat is free moves (its replacement
// takes the free seat).
func TestSeatAboveReplicaCount(t *testing.T) {
	w := newWorld(t, 3, []*corev1.Pod{pod(1, 1, "on-demand", true, 0), pod(2, 2, "spot", true, 0), pod(4, 2, "spot", true, 0)})
	w.loop.Pass(context.Background())
	if got := w.evictions(); len(got) != 1 || got[0] != "web-4" {
		t.Fatalf("evicted %v, want web-4 (seat 4 of 3 while seat 3 is free)", got)
	}
}

// A seat held by two pods (the ledger handed it out again after an owner replica's
// crash) while a seat up to the replica count is free: the second holder moves, the
// Ready one stays, though every term has its count.
func TestSeatHeldTwiceMoves(t *testing.T) {
	twice := pod(2, 2, "spot", false, 0)
	twice.Name, twice.UID = "web-2-again", "pod-2-again"
	w := newWorld(t, 3, []*corev1.Pod{pod(1, 1, "on-demand", true, 0), pod(2, 2, "spot", true, 0), twice})
	w.loop.Pass(context.Background())
	if got := w.evictions(); len(got) != 1 || got[0] != "web-2-again" {
		t.Fatalf("evicted %v, want web-2-again (seat 2 held twice while seat 3 is free; web-2 is Ready)", got)
	}
}

// A seat held twice while no seat is free (the replica count counts both) moves nothing.
func TestSeatHeldTwiceWithNoFreeSeatStays(t *testing.T) {
	twice := pod(2, 2, "spot", true, 0)
	twice.Name, twice.UID = "web-2-again", "pod-2-again"
	w := newWorld(t, 2, []*corev1.Pod{pod(1, 1, "on-demand", true, 0), pod(2, 2, "spot", true, 0), twice})
	w.loop.Pass(context.Background())
	if got := w.evictions(); len(got) != 0 {
		t.Fatalf("evicted %v with no seat free (the ReplicaSet controller removes the extra pod)", got)
	}
}

// Pods admitted without a seat (the webhook was down) are found by the replica count
// and moved, once the shortfall has been seen on two passes.
func TestUnplacedPodsMove(t *testing.T) {
	unplaced := pod(9, 1, "", true, 0)
	unplaced.Name, unplaced.UID = "web-unplaced", "pod-unplaced"
	delete(unplaced.Labels, strategy.LabelManaged)
	unplaced.Annotations, unplaced.Spec.NodeSelector = nil, nil
	w := newWorld(t, 2, []*corev1.Pod{pod(1, 1, "on-demand", true, 0), unplaced})
	ctx := context.Background()
	w.loop.Pass(ctx)
	if got := w.evictions(); len(got) != 0 {
		t.Fatalf("evicted %v on the first pass that saw the shortfall", got)
	}
	w.loop.Pass(ctx)
	if got := w.evictions(); len(got) != 1 || got[0] != "web-unplaced" {
		t.Fatalf("evicted %v, want the unplaced pod", got)
	}
	// The live listing asks only for pods the webhook did not place (the cache has the
	// others), or a big scale-up would move all of its pods every 10 s.
	lists := 0
	for _, a := range w.client.Actions() {
		if l, ok := a.(k8stesting.ListAction); ok && a.GetResource().Resource == "pods" {
			sel := l.GetListRestrictions().Labels
			if sel.Matches(labels.Set{strategy.LabelManaged: "true"}) {
				continue // the pod cache's own listing
			}
			lists++
			if sel.Matches(labels.Set{"app": "web", strategy.LabelManaged: "true"}) || !sel.Matches(labels.Set{"app": "web"}) {
				t.Errorf("pods listed with selector %q, want the revision's pods without %s", sel, strategy.LabelManaged)
			}
		}
	}
	if lists == 0 {
		t.Error("the unplaced pod was found without listing pods")
	}
}

// A pass reads every pod of every revision each interval, so it must not copy them
// all: a *corev1.Pod is 1.2 KiB, and 5,000 pods made 6 MB of garbage every 2 s (the
// leader's heap looked that much bigger at each collection). Steady pods, ready or
// young and unschedulable, cost it no copy.
func TestPassCopiesNoPodItDoesNotNeed(t *testing.T) {
	const n = 2000
	for _, ready := range []bool{true, false} {
		pods := []*corev1.Pod{pod(1, 1, "on-demand", ready, 5*time.Second)}
		for seat := 2; seat <= n; seat++ {
			pods = append(pods, pod(seat, 2, "spot", ready, 5*time.Second))
		}
		w := newWorld(t, n, pods)
		ctx := context.Background()
		w.loop.Pass(ctx) // the first pass sets up what later ones reuse
		var before, after goruntime.MemStats
		goruntime.GC()
		goruntime.ReadMemStats(&before)
		w.loop.Pass(ctx)
		goruntime.ReadMemStats(&after)
		perPod := float64(after.TotalAlloc-before.TotalAlloc) / n
		t.Logf("ready %v: %.0f bytes allocated per pod by a pass", ready, perPod)
		if perPod > 256 {
			t.Errorf("ready %v: a pass allocated %.0f bytes per pod, want at most 256 (no copy of each pod)", ready, perPod)
		}
		if got := w.evictions(); len(got) != 0 {
			t.Errorf("ready %v: evicted %v from a revision at its placement", ready, got)
		}
	}
}

// waitForRecord waits until the loop's informer has the revision's unavailability record.
func (w *world) waitForRecord(t *testing.T) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return w.records.Get(rsUID) != nil, nil
	}); err != nil {
		t.Fatal("the record never reached the informer")
	}
}

// One stuck pod marks its term unavailable, but the term's pods that have a node keep
// it: only the pod that cannot get one moves (18 Ready spot pods and 1 Pending used to
// see the Ready ones evicted to on-demand, budget by budget).
func TestHealthyPodsOnUnavailableTermStay(t *testing.T) {
	const both = "karpenter.sh/capacity-type=on-demand,base=1,weight=1:karpenter.sh/capacity-type=spot,weight=3"
	s, err := strategy.Parse(both)
	if err != nil {
		t.Fatal(err)
	}
	const n = 25
	var pods []*corev1.Pod
	last := 0
	for seat := 1; seat <= n; seat++ {
		if term := s.TermOfSeat(seat); term == 0 {
			pods = append(pods, pod(seat, 1, "on-demand", true, 0))
		} else {
			pods = append(pods, pod(seat, 2, "spot", true, 0))
			last = len(pods) - 1
		}
	}
	pods[last] = pod(last+1, 2, "spot", false, 30*time.Second) // the highest spot seat cannot get a node
	w := newWorldOf(t, both, n, pods)
	w.loop.cfg.MaxUnavailable = intstr.FromString("50%") // budget enough to move them all
	ctx := context.Background()
	w.loop.Pass(ctx)
	w.waitForRecord(t)
	for range 3 {
		w.loop.Pass(ctx)
	}
	want := fmt.Sprintf("web-%d", last+1)
	if got := w.evictions(); len(got) != 1 || got[0] != want {
		t.Fatalf("evicted %v, want only %s, the pod without a node", got, want)
	}
}

// A pod that is Running but not Ready is no free move: with 11 of 12 pods not Ready
// (a dependency failing readiness) and a budget of 1, nothing is evicted.
func TestNotReadyPodsWithANodeRespectTheBudget(t *testing.T) {
	pods := fallbackPods(12)
	for _, p := range pods[1:] {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
	}
	w := newWorld(t, 12, pods)
	w.loop.Pass(context.Background())
	if got := w.evictions(); len(got) != 0 {
		t.Fatalf("evicted %v with 11 of 12 pods unavailable and a budget of 1", got)
	}
}

// A term contained in a later one ("a=1:a=1,b=2", accepted with a warning): pods placed
// on the later term are selected by both, and must not read as the first term's drift.
func TestNestedTermsDoNotChurn(t *testing.T) {
	on := func(seat, term int, sel map[string]string) *corev1.Pod {
		p := pod(seat, term, "", true, 0)
		p.Spec.NodeSelector = sel
		return p
	}
	pods := []*corev1.Pod{on(1, 1, map[string]string{"a": "1"})}
	for seat := 2; seat <= 4; seat++ {
		pods = append(pods, on(seat, 2, map[string]string{"a": "1", "b": "2"}))
	}
	w := newWorldOf(t, "a=1,base=1,weight=0:a=1,b=2,weight=1", 4, pods)
	w.loop.Pass(context.Background())
	w.loop.Pass(context.Background())
	if got := w.evictions(); len(got) != 0 {
		t.Fatalf("evicted %v from a revision at its placement", got)
	}
}

// A leader that is no longer sure of its Lease (a long pause, a partition) evicts
// nothing: the fence is checked right before each eviction.
func TestNoEvictionWithoutLeadership(t *testing.T) {
	pods := fallbackPods(4)
	w := newWorld(t, 4, pods)
	leads := false
	w.loop.leading = func() bool { return leads }
	ctx := context.Background()
	w.loop.Pass(ctx)
	if got := w.evictions(); len(got) != 0 {
		t.Fatalf("evicted %v without holding the leadership", got)
	}
	leads = true
	w.loop.Pass(ctx)
	if got := w.evictions(); len(got) != 1 {
		t.Fatalf("evicted %v once leading again, want one pod (budget 1)", got)
	}
}

// A StatefulSet rolling to a new revision is a rollout: the loop's budget is 0. With
// OnDelete nothing rolls by itself, so it is not.
func TestStatefulSetRollout(t *testing.T) {
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns, UID: "sts-1", Generation: 2}}
	sts.Spec.Replicas = ptr(int32(3))
	sts.Status.ObservedGeneration = 2
	sts.Status.CurrentRevision, sts.Status.UpdateRevision = "db-1", "db-2"
	if !clusterview.StatefulSetRolling(sts) {
		t.Error("a StatefulSet between revisions db-1 and db-2 is rolling")
	}
	sts.Status.UpdateRevision = "db-1"
	if clusterview.StatefulSetRolling(sts) {
		t.Error("a StatefulSet at its update revision is not rolling")
	}
	sts.Status.ObservedGeneration = 1
	if !clusterview.StatefulSetRolling(sts) {
		t.Error("a spec change the controller has not observed yet is a rollout about to start")
	}
	sts.Spec.UpdateStrategy.Type = appsv1.OnDeleteStatefulSetStrategyType
	sts.Status.UpdateRevision = "db-2"
	if clusterview.StatefulSetRolling(sts) {
		t.Error("OnDelete: the user replaces pods, no rollout to wait for")
	}
	sts.Spec.UpdateStrategy.Type = ""
	w := newWorld(t, 1, []*corev1.Pod{pod(1, 1, "on-demand", true, 0)})
	if _, err := w.client.AppsV1().StatefulSets(ns).Create(context.Background(), sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		revs := w.loop.revisions()
		for _, rev := range revs {
			if rev.kind == "StatefulSet" {
				return rev.rolling, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatal("the rolling StatefulSet's revision is not marked rolling")
	}
}

// A revision scaled to zero drops out of a pass but keeps its record, so the cool-down
// keeps doubling when it comes back; a deleted one's record goes.
func TestRecordOfARevisionScaledToZeroStays(t *testing.T) {
	w := newWorld(t, 0, nil)
	ctx := context.Background()
	if _, err := w.records.Strike(ctx, rsUID, "Deployment shop/web", 1, "test", time.Minute); err != nil {
		t.Fatal(err)
	}
	w.waitForRecord(t)
	w.loop.Pass(ctx)
	if _, err := w.client.CoordinationV1().Leases("cksw").Get(ctx, unavailability.RecordName(rsUID), metav1.GetOptions{}); err != nil {
		t.Fatalf("the record of a revision scaled to zero was dropped: %v", err)
	}
	if err := w.client.AppsV1().ReplicaSets(ns).Delete(ctx, "web-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		w.loop.Pass(ctx)
		_, err := w.client.CoordinationV1().Leases("cksw").Get(ctx, unavailability.RecordName(rsUID), metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatal("the record of a deleted revision stayed")
	}
}

// fakeLaunches answers every term with one Flight.
type fakeLaunches struct {
	mu sync.Mutex
	f  karpenter.Flight
}

func (l *fakeLaunches) Flight(map[string]string, time.Time) karpenter.Flight {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f
}

// Pods that waited past FALLBACK_AFTER while Karpenter launches NodeClaims for their term
// (a big burst, a slow spot launch) do not make it unavailable; once nothing is launching
// and nothing progressed for FALLBACK_AFTER, time alone does.
func TestSlowLaunchIsNotUnavailable(t *testing.T) {
	pods := waitingOnSpot(5, 3*time.Minute)
	w := newWorld(t, 5, pods)
	launches := &fakeLaunches{f: karpenter.Flight{Launching: 3, LastProgress: time.Now().Add(-time.Minute)}}
	w.loop.cfg.Launches = launches
	ctx := context.Background()
	for range 3 {
		w.loop.Pass(ctx)
	}
	if _, err := w.client.CoordinationV1().Leases("cksw").Get(ctx, unavailability.RecordName(rsUID), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("term marked unavailable while Karpenter launches for it: %v", err)
	}
	launches.mu.Lock()
	launches.f = karpenter.Flight{Registered: 2, LastProgress: time.Now().Add(-5 * time.Second)}
	launches.mu.Unlock()
	w.loop.Pass(ctx)
	if _, err := w.client.CoordinationV1().Leases("cksw").Get(ctx, unavailability.RecordName(rsUID), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("term marked unavailable 5s after Karpenter's last progress (FALLBACK_AFTER 20s): %v", err)
	}
	launches.mu.Lock()
	launches.f = karpenter.Flight{Registered: 2, LastProgress: time.Now().Add(-time.Minute)}
	launches.mu.Unlock()
	w.loop.Pass(ctx)
	rec := w.record(t, "no progress for a minute and pods waiting 3m: want the term unavailable")
	if st := rec.Terms[1]; !strings.Contains(st.Reason, "Karpenter is launching nothing") || !strings.Contains(st.Reason, "2 registered") {
		t.Errorf("the record's reason %q does not give the evidence", st.Reason)
	}
	if got := w.evictions(); len(got) != 0 {
		t.Errorf("evicted %v", got)
	}
}

// After a cool-down the return starts with one canary, the highest seat: the term may
// still have no capacity. Once a pod created since then is Ready there, the rest follow
// within the budget.
func TestReturnStartsWithACanary(t *testing.T) {
	pods := fallbackPods(12)
	w := newWorld(t, 12, pods)
	w.loop.cfg.MaxUnavailable = intstr.FromString("50%")
	ctx := context.Background()
	if _, err := w.records.Strike(ctx, rsUID, "Deployment shop/web", 1, "test", time.Millisecond); err != nil {
		t.Fatal(err)
	}
	w.waitForRecord(t)
	time.Sleep(10 * time.Millisecond) // the cool-down is over
	for range 3 {
		w.loop.Pass(ctx)
	}
	if got := w.evictions(); len(got) != 1 || got[0] != "web-12" {
		t.Fatalf("evicted %v, want only the canary web-12 until it runs on its term", got)
	}
	// The canary's replacement runs on spot.
	if err := w.client.CoreV1().Pods(ns).Delete(ctx, "web-12", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	back := pod(12, 2, "spot", true, 0)
	back.Name, back.UID, back.CreationTimestamp = "web-12-back", "pod-12-back", metav1.Now()
	if _, err := w.client.CoreV1().Pods(ns).Create(ctx, back, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		w.loop.Pass(ctx)
		return len(w.evictions()) > 1, nil
	}); err != nil {
		t.Fatalf("evicted %v: the return did not go on once the canary ran", w.evictions())
	}
}

// Stranded pods are not sent to a fallback term whose own pods wait for capacity too.
func TestNoMoveOntoAWaitingFallbackTerm(t *testing.T) {
	pods := []*corev1.Pod{pod(1, 1, "on-demand", false, 5*time.Second)}
	for seat := 2; seat <= 5; seat++ {
		pods = append(pods, pod(seat, 2, "spot", false, 30*time.Second))
	}
	w := newWorld(t, 5, pods)
	ctx := context.Background()
	w.loop.Pass(ctx)
	w.waitForRecord(t)
	w.loop.Pass(ctx)
	if got := w.evictions(); len(got) != 0 {
		t.Fatalf("evicted %v toward on-demand while on-demand's own pod waits for a node", got)
	}
}

// The words eventWords looks for are Karpenter's own, not exported by it: find each in
// the source of the Karpenter version in go.mod, so an upgrade that rewords one fails here.
func TestKarpenterWordsArePinned(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/karpenter").Output()
	if err != nil {
		t.Fatalf("go list -m sigs.k8s.io/karpenter: %v", err)
	}
	dir := strings.TrimSpace(string(out))
	var src strings.Builder
	for _, f := range []string{
		"pkg/controllers/provisioning/scheduling/scheduler.go",
		"pkg/controllers/provisioning/scheduling/events.go",
		"pkg/controllers/provisioning/provisioner.go",
		"pkg/cloudprovider/types.go",
		"pkg/events/reason.go",
	} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		src.Write(b)
	}
	for _, word := range append([]string{"Failed to schedule pod, %s", `FailedScheduling          = "FailedScheduling"`, `Nominated                 = "Nominated"`}, unlaunchable...) {
		if !strings.Contains(src.String(), word) {
			t.Errorf("Karpenter's source no longer says %q: see how it reports that it cannot launch", word)
		}
	}
}

// The record and Event of a marked term say how many of its pending pods Karpenter had
// nominated for capacity (its Nominated Events).
func TestStrikeReportsNominations(t *testing.T) {
	pods := waitingOnSpot(5, 30*time.Second)
	w := newWorld(t, 5, pods)
	w.loop.cfg.Signals = NewKarpenterSignals(w.client, nil, nil)
	ctx := context.Background()
	for i, p := range pods[1:3] {
		ev := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: fmt.Sprintf("nominated-%d", i), Namespace: ns},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: p.Name, UID: p.UID},
			Reason:         "Nominated", Message: "Pod should schedule on: nodeclaim/spot-x",
			Source: corev1.EventSource{Component: "karpenter"},
		}
		if _, err := w.client.CoreV1().Events(ns).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	w.loop.Pass(ctx)
	rec := w.record(t, "no unavailability record")
	if st := rec.Terms[1]; !strings.Contains(st.Reason, "Karpenter nominated 2 of the 4 pending pods") {
		t.Errorf("the record's reason %q does not say how many pending pods were nominated", st.Reason)
	}
}

// A marked term's waiting pods that Karpenter nominated for capacity it is still bringing
// (a NodePool whose limits leave room for some of a burst) wait for it; the others move,
// as does one whose nomination Karpenter took back (it said it cannot schedule it since).
// Once the term's NodeClaims stop progressing, the nominated ones move too.
func TestNominatedPodsWaitForTheirNode(t *testing.T) {
	pods := waitingOnSpot(5, 30*time.Second)
	w := newWorld(t, 5, pods)
	w.loop.cfg.Signals = NewKarpenterSignals(w.client, nil, nil)
	ctx := context.Background()
	said := func(p *corev1.Pod, reason, msg string, ago time.Duration) {
		ev := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: fmt.Sprintf("%s-%s", p.Name, strings.ToLower(reason)), Namespace: ns},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: p.Name, UID: p.UID},
			Reason:         reason, Message: msg, Source: corev1.EventSource{Component: "karpenter"},
			LastTimestamp: metav1.NewTime(time.Now().Add(-ago)),
		}
		if _, err := w.client.CoreV1().Events(ns).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range pods[1:4] {
		said(p, "Nominated", "Pod should schedule on: nodeclaim/spot-x", 20*time.Second)
	}
	said(pods[3], "FailedScheduling", "Failed to schedule pod, no instance type fits", 10*time.Second)
	w.loop.Pass(ctx) // marks term 2 (nothing launching yet: time alone)
	w.record(t, "no unavailability record")
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return w.records.Get(rsUID) != nil, nil
	}); err != nil {
		t.Fatal("the record never reached the informer")
	}
	launches := &fakeLaunches{f: karpenter.Flight{Launching: 1, LastProgress: time.Now()}}
	w.loop.cfg.Launches = launches
	w.loop.Pass(ctx)
	got := w.evictions()
	slices.Sort(got)
	if want := []string{pods[3].Name, pods[4].Name}; !slices.Equal(got, want) {
		t.Fatalf("evicted %v while a NodeClaim launches for the nominated pods; want only the others %v", got, want)
	}
	launches.mu.Lock()
	launches.f = karpenter.Flight{LastProgress: time.Now().Add(-time.Minute)}
	launches.mu.Unlock()
	w.loop.Pass(ctx)
	if got := w.evictions(); len(got) != 4 {
		t.Fatalf("evicted %v once nothing launches; want the nominated pods moved too", got)
	}
}

// The stop switch (Config.Stopped) keeps every pod where it is, also when it is flipped
// within a pass (it is read before every eviction), and the moves finish once it is
// lifted; the gauge says it is on.
func TestStopSwitch(t *testing.T) {
	// Seats 2..6 belong to spot but stand on on-demand: five drift moves.
	pods := []*corev1.Pod{pod(1, 1, "on-demand", true, 0)}
	for seat := 2; seat <= 6; seat++ {
		pods = append(pods, pod(seat, 1, "on-demand", true, 0))
	}
	w := newWorld(t, 6, pods)
	stop := ""
	reads := 0
	w.loop.cfg.Stopped = func(string) string { return stop }
	w.loop.cfg.MaxUnavailable = intstr.FromInt32(3)
	ctx := context.Background()
	stop = "every move is stopped"
	w.loop.Pass(ctx)
	if got := w.evictions(); len(got) != 0 {
		t.Fatalf("evicted %v while stopped", got)
	}
	if v := testutil.ToFloat64(w.loop.cfg.Metrics.stopped); v != 1 {
		t.Errorf("converge_moves_stopped %v while stopped, want 1", v)
	}
	// Flipped on after the pass's first eviction: no second one.
	stop = ""
	w.loop.cfg.Stopped = func(string) string {
		reads++
		if reads > 2 { // observe's and the first eviction's reads
			return "stopped mid-pass"
		}
		return ""
	}
	w.loop.Pass(ctx)
	if got := w.evictions(); len(got) != 1 {
		t.Fatalf("evicted %v; want the one before the switch was flipped", got)
	}
	w.loop.cfg.Stopped = func(string) string { return "" }
	w.loop.Pass(ctx)
	if got := w.evictions(); len(got) < 2 {
		t.Fatalf("evicted %v after the switch was lifted; want the moves to go on", got)
	}
	if v := testutil.ToFloat64(w.loop.cfg.Metrics.stopped); v != 0 {
		t.Errorf("converge_moves_stopped %v once lifted, want 0", v)
	}
}

// A Job's pods on their fallback stay by default (a killed batch pod loses its work);
// with the Job's move-job-pods opt-in the loop returns them within its budget, as a
// Deployment's.
func TestJobPodsMoveOnlyWhenOptedIn(t *testing.T) {
	for _, tc := range []struct {
		name       string
		annotation map[string]string
		want       []string
	}{
		{"default", nil, nil},
		{"opted in", map[string]string{strategy.AnnotationMoveJobPods: "true"}, []string{"web-12"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			jobOwner := []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "crunch", UID: "job-1", Controller: ptr(true)}}
			pods := fallbackPods(12)
			for _, p := range pods {
				p.OwnerReferences = jobOwner
			}
			w := newWorld(t, 0, pods)
			ctx := context.Background()
			job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "crunch", Namespace: ns, UID: "job-1", Annotations: tc.annotation},
				Spec: batchv1.JobSpec{Parallelism: ptr(int32(12)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}
			job.Spec.Template.Annotations = map[string]string{strategy.AnnotationStrategy: strat}
			if _, err := w.client.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
				revs := w.loop.revisions()
				return len(revs) == 1 && revs[0].kind == "Job", nil
			}); err != nil {
				t.Fatal("the running Job is no revision of the loop")
			}
			w.loop.Pass(ctx)
			if got := w.evictions(); strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("evicted %v, want %v (budget 1 when opted in, none by default)", got, tc.want)
			}
		})
	}
}
