package converge

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// These tests run the loop on the pod cache as serve builds it (trimmed pods), with
// pods of mixed readiness and terms: each decision must read the pod it is about, not
// the last pod the cache showed.

// Seats 9 and 10 are Ready on on-demand, off their term (drift), while spot's seats 2
// to 8 wait for nodes: 7 of 10 pods are unavailable and the budget is 8, so one Ready
// pod may go. Read with the readiness of a pending pod, both look free to evict. The
// cache hands pods out in no set order, so the case runs in several clusters: each
// would show the defect unless one of the three Ready pods came last.
func TestBudgetReadsEachPodsOwnReadiness(t *testing.T) {
	const replicas = 10
	for i := range 8 {
		pods := []*corev1.Pod{pod(1, 1, "on-demand", true, 0)}
		for seat := 2; seat <= 8; seat++ {
			pods = append(pods, pod(seat, 2, "spot", false, 5*time.Second))
		}
		pods = append(pods, pod(9, 1, "on-demand", true, 0), pod(10, 1, "on-demand", true, 0))
		w := newWorld(t, replicas, pods)
		w.loop.cfg.MaxUnavailable = intstr.FromInt32(8)
		w.loop.Pass(context.Background())
		if got, want := w.evictions(), []string{"web-10"}; !slices.Equal(got, want) {
			t.Fatalf("cluster %d: evicted %v, want %v: 7 of 10 pods are unavailable, budget 8", i, got, want)
		}
	}
}

// Two terms fell back to term 1 and both cool-downs ended: each gets its own canary, the
// highest seat moving back to it. Reading another pod's fallback-from puts every move
// on one term (one canary) or on none.
func TestEachFallenBackTermGetsItsOwnCanary(t *testing.T) {
	const (
		replicas = 12
		strat3   = "tier=od,base=1,weight=0:tier=spot-a,weight=1:tier=spot-b,weight=1"
	)
	s, err := strategy.Parse(strat3)
	if err != nil {
		t.Fatal(err)
	}
	placement := s.Place(replicas, func(int) bool { return false })
	pods := []*corev1.Pod{onTier(1, 1, "od")}
	highest := map[int]string{} // term -> the name of its highest seat's pod
	for seat := 2; seat <= replicas; seat++ {
		p := onTier(seat, 1, "od")
		own := placement.Terms[seat-1]
		p.Annotations[strategy.AnnotationFallbackFrom] = strconv.Itoa(own + 1)
		pods = append(pods, p)
		highest[own] = p.Name
	}
	if len(highest) != 2 {
		t.Fatalf("placement %v: want seats on terms 2 and 3", placement.Terms)
	}
	w := newWorldOf(t, strat3, replicas, pods)
	w.loop.cfg.MaxUnavailable = intstr.FromString("50%")
	ctx := context.Background()
	for _, term := range []int{1, 2} {
		if _, err := w.records.Strike(ctx, rsUID, "Deployment shop/web", term, "test", time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	w.waitForRecord(t)
	time.Sleep(10 * time.Millisecond) // both cool-downs are over
	w.loop.Pass(ctx)
	got := w.evictions()
	slices.Sort(got)
	want := []string{highest[1], highest[2]}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("evicted %v, want one canary per term: %v", got, want)
	}
}

// onTier makes a Ready placed pod of seat on term (1-based) whose nodeSelector is tier.
func onTier(seat, term int, tier string) *corev1.Pod {
	p := pod(seat, term, "", true, 0)
	p.Spec.NodeSelector = map[string]string{"tier": tier}
	return p
}

// A StatefulSet at its update revision, as the workload cache keeps it (trimmed), is
// not rolling: the trimmed copy once dropped the status and update strategy, so every
// StatefulSet read as a rollout and the loop moved none of its pods that had a node.
func TestSettledStatefulSetIsNotRollingInTheCache(t *testing.T) {
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns, UID: "sts-1", Generation: 2}}
	sts.Spec.Replicas = ptr(int32(3))
	sts.Status.ObservedGeneration = 2
	sts.Status.CurrentRevision, sts.Status.UpdateRevision = "db-1", "db-1"
	w := newWorld(t, 1, []*corev1.Pod{pod(1, 1, "on-demand", true, 0)})
	ctx := context.Background()
	if _, err := w.client.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var rev revision
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		var ok bool
		rev, ok = w.loop.revisionByUID("sts-1")
		return ok, nil
	}); err != nil {
		t.Fatal("the StatefulSet never reached the cache")
	}
	if rev.rolling {
		t.Error("a StatefulSet at its update revision reads as rolling from the cache")
	}
}
