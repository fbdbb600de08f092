package report

import (
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/unavailability"
)

const reportStrategy = "capacity=on-demand,base=1:capacity=spot"

func ownedBy(kind, name string, uid types.UID) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: name, UID: uid, Controller: ptr.To(true)}}
}

func placedPod(name string, owner types.UID, seat int, capacity string, phase corev1.PodPhase, node string) corev1.Pod {
	p := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "demo", OwnerReferences: ownedBy("ReplicaSet", "rs", owner)},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: phase},
	}
	if seat > 0 {
		p.Annotations = map[string]string{strategy.AnnotationSeat: strconv.Itoa(seat)}
		p.Spec.NodeSelector = map[string]string{"capacity": capacity}
	}
	return p
}

func TestBuild(t *testing.T) {
	dep := appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "demo", UID: "dep", Annotations: map[string]string{strategy.AnnotationStrategy: reportStrategy}},
		Spec:       appsv1.DeploymentSpec{Replicas: ptr.To[int32](4)},
	}
	rs := func(name string, uid types.UID, revision string) appsv1.ReplicaSet {
		return appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "demo", UID: uid,
			Annotations: map[string]string{"deployment.kubernetes.io/revision": revision}, OwnerReferences: ownedBy("Deployment", "web", "dep")}}
	}
	pending := placedPod("p4", "new", 4, "spot", corev1.PodPending, "")
	pending.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: "0/2 nodes are available"}}
	terminating := placedPod("gone", "new", 2, "spot", corev1.PodRunning, "n2")
	terminating.DeletionTimestamp = &metav1.Time{}
	st := &State{
		Deployments: []appsv1.Deployment{dep},
		ReplicaSets: []appsv1.ReplicaSet{rs("web-old", "old", "1"), rs("web-new", "new", "2")},
		Pods: []corev1.Pod{
			placedPod("p1", "new", 1, "on-demand", corev1.PodRunning, "n1"),
			placedPod("p2", "new", 2, "spot", corev1.PodRunning, "n2"),
			placedPod("p3", "new", 3, "spot", corev1.PodRunning, "n2"),
			pending, terminating,
			placedPod("old1", "old", 1, "on-demand", corev1.PodRunning, "n1"),
		},
		Nodes: map[string]*corev1.Node{
			"n1": {ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"karpenter.sh/capacity-type": "on-demand"}}},
			"n2": {ObjectMeta: metav1.ObjectMeta{Name: "n2", Labels: map[string]string{"eks.amazonaws.com/capacityType": "SPOT"}}},
		},
		ServedBy: func(labels map[string]string) []string { return []string{"NodePool/" + labels["capacity"]} },
	}
	r := Build(st, func(string, string) bool { return true })
	if len(r.Workloads) != 1 {
		t.Fatalf("workloads: %+v", r.Workloads)
	}
	w := r.Workloads[0]
	if w.Revision != "web-new" || w.OtherRevisions != 1 || w.Unplaced != 0 || !w.Exact {
		t.Fatalf("workload: %+v", w)
	}
	od, spot := w.Terms[0], w.Terms[1]
	if od.Target != 1 || od.Placed != 1 || od.Running != 1 || spot.Target != 3 || spot.Placed != 3 || spot.Running != 2 || spot.Pending != 1 {
		t.Fatalf("terms: %+v", w.Terms)
	}
	if len(spot.PendingReasons) != 1 || !strings.Contains(spot.PendingReasons[0], "0/2 nodes") {
		t.Errorf("pending reasons: %v", spot.PendingReasons)
	}
	if len(spot.Nodes) != 1 || spot.Nodes[0] != (NodeReport{Name: "n2", CapacityType: "spot", Pods: 2}) {
		t.Errorf("spot nodes: %+v", spot.Nodes)
	}
	if spot.ServedBy[0] != "NodePool/spot" {
		t.Errorf("served by: %v", spot.ServedBy)
	}

	// A pod on a term that cannot run its images: counted on its term, not exact.
	st.Pods[1].Annotations[strategy.AnnotationCannotRun] = "term 2 cannot run the pod's images"
	r = Build(st, func(string, string) bool { return true })
	if w := r.Workloads[0]; w.Exact || w.Terms[1].CannotRun != 1 || w.Terms[1].CannotRunReason != "term 2 cannot run the pod's images" || w.Terms[1].Placed != 3 {
		t.Fatalf("a pod that cannot run: %+v", w)
	}
	delete(st.Pods[1].Annotations, strategy.AnnotationCannotRun)

	// A pod off its seat's term: a repair, unless it carries do-not-disrupt (the loop
	// leaves it there); not exact either way.
	st.Pods[2].Spec.NodeSelector["capacity"] = "on-demand"
	if w := Build(st, func(string, string) bool { return true }).Workloads[0]; w.Exact || w.PendingRepairs != 1 || w.DoNotDisrupt != 0 {
		t.Fatalf("a pod off its term: %+v", w)
	}
	st.Pods[2].Annotations[karpv1.DoNotDisruptAnnotationKey] = "true"
	if w := Build(st, func(string, string) bool { return true }).Workloads[0]; w.Exact || w.PendingRepairs != 0 || w.DoNotDisrupt != 1 {
		t.Fatalf("a do-not-disrupt pod off its term: %+v", w)
	}
	st.Pods[2] = placedPod("p3", "new", 3, "spot", corev1.PodRunning, "n2")

	// One pod missing from its term: not exact, and said so.
	st.Pods = st.Pods[1:]
	r = Build(st, func(string, string) bool { return true })
	if r.Workloads[0].Exact {
		t.Fatal("a missing on-demand pod still reads exact")
	}
}

// While spot is unavailable, the expected placement is the fallback: all on on-demand,
// and the spot seats count as its fallback pods; once it is back, they are repairs.
func TestBuildFallback(t *testing.T) {
	dep := appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "demo", UID: "dep", Annotations: map[string]string{strategy.AnnotationStrategy: reportStrategy}},
		Spec:       appsv1.DeploymentSpec{Replicas: ptr.To[int32](3)},
	}
	rs := appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-new", Namespace: "demo", UID: "new",
		Annotations: map[string]string{"deployment.kubernetes.io/revision": "1"}, OwnerReferences: ownedBy("Deployment", "web", "dep")}}
	st := &State{Deployments: []appsv1.Deployment{dep}, ReplicaSets: []appsv1.ReplicaSet{rs}, Nodes: map[string]*corev1.Node{}}
	for seat := 1; seat <= 3; seat++ {
		p := placedPod("p"+strconv.Itoa(seat), "new", seat, "on-demand", corev1.PodRunning, "n1")
		if seat > 1 {
			p.Annotations[strategy.AnnotationFallbackFrom] = "2"
		}
		st.Pods = append(st.Pods, p)
	}
	until := time.Now().Add(time.Minute)
	st.Unavailable = func(uid types.UID) map[int]unavailability.TermState {
		if uid != "new" {
			return nil
		}
		return map[int]unavailability.TermState{1: {Until: until, Reason: "2 pods unschedulable for 90s"}}
	}
	w := Build(st, func(string, string) bool { return true }).Workloads[0]
	od, spot := w.Terms[0], w.Terms[1]
	// In fallback: where the placement wants the pods now, but not exact (one meaning of
	// exact: every seat on its own term), with the term's reason.
	if w.Exact || w.State != string(strategy.StateFallback) || !strings.Contains(w.Why, "2 pods unschedulable for 90s") || w.PendingRepairs != 0 || od.Expected != 3 || spot.Expected != 0 || spot.Target != 2 || spot.FallbackPods != 2 || spot.UnavailableUntil == "" {
		t.Fatalf("while spot is unavailable: %+v", w)
	}

	st.Unavailable = nil
	w = Build(st, func(string, string) bool { return true }).Workloads[0]
	if w.Exact || w.State != string(strategy.StateOffTarget) || w.PendingRepairs != 2 {
		t.Fatalf("spot back: exact %v (%s), pending repairs %d; want off target, 2", w.Exact, w.State, w.PendingRepairs)
	}
}

// Outside its window a workload with repairs pending says its moves wait, and when.
func TestReportSaysMovesWaitForTheWindow(t *testing.T) {
	win, err := strategy.ParseWindow("schedule=0 2 * * *; duration=1h")
	if err != nil {
		t.Fatal(err)
	}
	noon := time.Date(2026, 1, 14, 12, 0, 0, 0, time.UTC)
	w := WorkloadReport{PendingRepairs: 2}
	w.timing(strategy.Timing{Window: win, WindowSource: "PlacementPolicy shop/web"}, noon)
	if want := `non-urgent moves wait for window "schedule=0 2 * * *; duration=1h0m0s" (set on PlacementPolicy shop/web; opens at 2026-01-15T02:00:00Z)`; w.Waits != want {
		t.Errorf("waits %q, want %q", w.Waits, want)
	}
	cluster := WorkloadReport{PendingRepairs: 2}
	cluster.timing(strategy.Timing{Window: win}, noon)
	if !strings.Contains(cluster.Waits, "(set by the cluster's MOVE_WINDOW; opens at 2026-01-15T02:00:00Z)") {
		t.Errorf("the cluster's window: waits %q", cluster.Waits)
	}
	inside := WorkloadReport{PendingRepairs: 2}
	inside.timing(strategy.Timing{Window: win}, noon.Add(-9*time.Hour-30*time.Minute))
	if inside.Waits != "" || inside.MoveWindow == "" {
		t.Errorf("inside the window: waits %q, window %q", inside.Waits, inside.MoveWindow)
	}
}
