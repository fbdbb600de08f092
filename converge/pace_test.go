package converge

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
)

// driftWorld is a Deployment of 6 pods whose seats 2..6 belong to spot but stand on
// on-demand (five drift moves), with a per-workload budget that does not bind.
func driftWorld(t *testing.T) *world {
	t.Helper()
	pods := []*corev1.Pod{pod(1, 1, "on-demand", true, 0)}
	for seat := 2; seat <= 6; seat++ {
		pods = append(pods, pod(seat, 1, "on-demand", true, 0))
	}
	w := newWorld(t, 6, pods)
	w.loop.cfg.MaxUnavailable = intstr.FromInt32(5)
	return w
}

// The cluster-wide pace holds the loop's evictions of pods with a node to
// MaxUnavailableCluster until their replacements are Ready, pass after pass; a Ready
// replacement lets the next one go. The gauge counts the moves it holds.
func TestClusterPace(t *testing.T) {
	w := driftWorld(t)
	w.loop.cfg.MaxUnavailableCluster = 2
	ctx := context.Background()
	w.loop.Pass(ctx)
	w.loop.Pass(ctx)
	got := w.evictions()
	if len(got) != 2 {
		t.Fatalf("evicted %v, want two: the cluster-wide pace", got)
	}
	if v := testutil.ToFloat64(w.loop.cfg.Metrics.waiting.WithLabelValues("pace")); v != 3 {
		t.Errorf("converge_waiting_pods{for=pace} %v, want 3", v)
	}
	if msg := w.loop.mem.blocked[rsUID]; !strings.Contains(msg, "CONVERGE_MAX_UNAVAILABLE_CLUSTER") {
		t.Errorf("the moves wait with %q, want the cluster-wide pace named", msg)
	}
	// One evicted pod is replaced by a Ready pod on its seat's term: one more may go.
	if err := w.client.CoreV1().Pods(ns).Delete(ctx, got[0], metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	seat := int(got[0][len("web-")] - '0')
	back := pod(seat, 2, "spot", true, 0)
	back.Name, back.UID = got[0]+"-back", types.UID(got[0]+"-back")
	if _, err := w.client.CoreV1().Pods(ns).Create(ctx, back, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		w.loop.Pass(ctx)
		return len(w.evictions()) > 2, nil
	}); err != nil {
		t.Fatalf("evicted %v: no move once a replacement was Ready", w.evictions())
	}
	w.loop.Pass(ctx)
	if got := w.evictions(); len(got) != 3 {
		t.Fatalf("evicted %v, want three: one Ready replacement frees one place", got)
	}
}

// The namespace's pace holds as the cluster's does, and says so.
func TestNamespacePace(t *testing.T) {
	w := driftWorld(t)
	w.loop.cfg.MaxUnavailablePerNamespace = 1
	w.loop.Pass(context.Background())
	if got := w.evictions(); len(got) != 1 {
		t.Fatalf("evicted %v, want one: the namespace's pace", got)
	}
	if msg := w.loop.mem.blocked[rsUID]; !strings.Contains(msg, "CONVERGE_MAX_UNAVAILABLE_PER_NAMESPACE") {
		t.Errorf("the moves wait with %q, want the namespace's pace named", msg)
	}
}

// What the pace counts: a revision's evictions bounded by its pods unavailable, by
// namespace; and its order: a waiting revision before another in namespace, then name,
// goes first while its namespace has room.
func TestPaceMemory(t *testing.T) {
	m := newMemory()
	m.noteInFlight("a", "shop")
	m.noteInFlight("a", "shop")
	m.noteInFlight("b", "web")
	if c, n := m.inFlight("shop"); c != 3 || n != 2 {
		t.Fatalf("in flight %d in the cluster, %d in shop; want 3, 2", c, n)
	}
	m.stillUnavailable("a", 5) // other pods unavailable too: its evictions still count
	m.stillUnavailable("b", 0) // its replacement is Ready
	if c, n := m.inFlight("shop"); c != 2 || n != 2 {
		t.Fatalf("in flight %d in the cluster, %d in shop; want 2, 2", c, n)
	}
	m.stillUnavailable("a", 1)
	if c, _ := m.inFlight("shop"); c != 1 {
		t.Fatalf("in flight %d, want 1", c)
	}
	room := map[string]bool{"shop": true, "web": true}
	has := func(ns string) bool { return room[ns] }
	m.waitsForPace("x", paceKey{"shop", "api Deployment"}, true)
	if !m.pacedBefore("y", paceKey{"shop", "web Deployment"}, has) || !m.pacedBefore("y", paceKey{"web", "api Deployment"}, has) {
		t.Error("a workload after a waiting one in the order went first")
	}
	if m.pacedBefore("x", paceKey{"shop", "api Deployment"}, has) || m.pacedBefore("y", paceKey{"payments", "web Deployment"}, has) {
		t.Error("a workload first in the order waited")
	}
	room["shop"] = false
	if m.pacedBefore("y", paceKey{"web", "api Deployment"}, has) {
		t.Error("a workload waited for one whose namespace has no room")
	}
	m.waitsForPace("x", paceKey{}, false)
	room["shop"] = true
	if m.pacedBefore("y", paceKey{"web", "api Deployment"}, has) {
		t.Error("a workload waited for one that no longer waits")
	}
	m.noteInFlight("a", "shop")
	m.forget("a")
	if c, _ := m.inFlight("shop"); c != 0 {
		t.Errorf("in flight %d after the revision was forgotten, want 0", c)
	}
}
