package clusterview

import (
	"encoding/json"
	"reflect"
	"strconv"
	"testing"
	"time"
	"unique"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// decodedPod returns a placed, Running pod of the test ReplicaSet as the informer's
// decoder would: strings of its own, not shared with any other pod.
func decodedPod(t *testing.T, name string, seat int) *corev1.Pod {
	t.Helper()
	since := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	yes := true
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: testNS, UID: types.UID("pod-uid-" + name), ResourceVersion: "42",
			CreationTimestamp: since,
			Labels:            map[string]string{"app": "web", strategy.LabelManaged: "true"},
			Annotations: map[string]string{
				strategy.AnnotationStrategy: burstStrategy, strategy.AnnotationSeat: strconv.Itoa(seat), strategy.AnnotationTerm: "2",
				strategy.AnnotationFallbackFrom: "1", strategy.AnnotationReservation: "admission-" + name,
				strategy.AnnotationDeletionCost: "-3",
			},
			OwnerReferences: []metav1.OwnerReference{
				{APIVersion: "v1", Kind: "ConfigMap", Name: "other", UID: "cm-uid"},
				{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-5c4ff85997", UID: testRSUID, Controller: &yes, BlockOwnerDeletion: &yes},
			},
		},
		Spec: corev1.PodSpec{
			NodeName:     "node-1",
			NodeSelector: map[string]string{"karpenter.sh/capacity-type": "spot"},
			Containers:   []corev1.Container{{Name: "app", Image: "app:1"}},
			Tolerations:  []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists}},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: since},
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, Reason: "r", Message: "m", LastTransitionTime: since},
				{Type: corev1.ContainersReady, Status: corev1.ConditionTrue},
			},
		},
	}
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	var out corev1.Pod
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

func trimmed(t *testing.T, pod *corev1.Pod) *cachedPod {
	t.Helper()
	obj, err := trimPod(pod)
	if err != nil {
		t.Fatal(err)
	}
	cp, ok := obj.(*cachedPod)
	if !ok {
		t.Fatalf("trimPod returned %T", obj)
	}
	return cp
}

func TestTrimPodKeepsWhatIsRead(t *testing.T) {
	orig := decodedPod(t, "web-a", 3)
	cp := trimmed(t, orig)
	pod := podOf(cp)
	s, err := strategy.Parse(burstStrategy)
	if err != nil {
		t.Fatal(err)
	}
	if seat, ok := strategy.SeatOf(pod); !ok || seat != 3 {
		t.Errorf("SeatOf = %d, %v; want 3", seat, ok)
	}
	if got := strategy.TermOf(s, pod); got != 1 {
		t.Errorf("TermOf = %d, want 1", got)
	}
	if !strategy.HoldsSeat(pod) {
		t.Error("a Running pod does not hold its seat")
	}
	rev, seat, ok := PlacedSeat(pod)
	if !ok || rev != (Revision{Namespace: testNS, UID: testRSUID}) || seat != 3 {
		t.Errorf("PlacedSeat = %v, %d, %v", rev, seat, ok)
	}
	want := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: orig.Name, Namespace: orig.Namespace, UID: orig.UID, ResourceVersion: orig.ResourceVersion,
			CreationTimestamp: orig.CreationTimestamp,
			Annotations: map[string]string{
				strategy.AnnotationSeat: "3", strategy.AnnotationTerm: "2", strategy.AnnotationFallbackFrom: "1",
				strategy.AnnotationReservation: "admission-web-a",
			},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-5c4ff85997", UID: testRSUID, Controller: orig.OwnerReferences[1].Controller}},
		},
		Spec: corev1.PodSpec{NodeName: "node-1", NodeSelector: orig.Spec.NodeSelector},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue},
		}},
	}
	if !reflect.DeepEqual(pod, want) {
		t.Errorf("cached pod\n%+v\nwant\n%+v", pod, want)
	}

	// An object trimmed already (a relist's Replace) comes back as is.
	if again, err := trimPod(cp); err != nil || again != any(cp) {
		t.Errorf("trimPod of a cached pod = %v, %v", again, err)
	}
}

func TestTrimPodSharesWhatPodsHaveInCommon(t *testing.T) {
	a, b := trimmed(t, decodedPod(t, "web-a", 1)), trimmed(t, decodedPod(t, "web-b", 2))
	if a.nodeName != b.nodeName || a.nodeName == (unique.Handle[string]{}) {
		t.Errorf("node name not shared: %q and %q", value(a.nodeName), value(b.nodeName))
	}
	if a.owner != b.owner {
		t.Error("namespace and controller reference not shared")
	}
	if a.placement != b.placement || a.placement == (unique.Handle[podPlacement]{}) {
		t.Errorf("term annotations and node selector not shared: %+v and %+v", a.placementOf(), b.placementOf())
	}
	if a.status != b.status || a.status == (unique.Handle[podStatus]{}) {
		t.Errorf("phase not shared: %+v and %+v", a.statusOf(), b.statusOf())
	}
	if a.name == b.name || a.seat == b.seat || a.uid == b.uid {
		t.Error("the pods' own values got mixed up")
	}
}

// A pod's own values are packed when they have the usual form, and kept as they came
// otherwise: either way the pod reads them back unchanged.
func TestTrimPodPacksOwnValues(t *testing.T) {
	usual := decodedPod(t, "web-u", 7)
	usual.ResourceVersion = "18446744073709551615"
	usual.Annotations[strategy.AnnotationReservation] = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
	odd := decodedPod(t, "web-o", 7)
	odd.ResourceVersion = "r17"
	odd.Annotations[strategy.AnnotationSeat] = "007"
	odd.CreationTimestamp = metav1.NewTime(time.Date(2200, 1, 2, 3, 4, 5, 0, time.UTC).Local())
	odd.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable",
		LastTransitionTime: metav1.NewTime(time.Date(2201, 1, 2, 3, 4, 5, 0, time.UTC).Local())}}
	for _, c := range []struct {
		pod     *corev1.Pod
		packed  bool
		seatNum int
	}{{usual, true, 7}, {odd, false, 7}} {
		cp := trimmed(t, c.pod)
		if (cp.odd == nil) != c.packed {
			t.Errorf("%s: odd values %+v, want packed %v", c.pod.Name, cp.odd, c.packed)
		}
		got := podOf(cp)
		if got.ResourceVersion != c.pod.ResourceVersion || !got.CreationTimestamp.Equal(&c.pod.CreationTimestamp) {
			t.Errorf("%s: resource version %q, created %v; want %q, %v", c.pod.Name, got.ResourceVersion, got.CreationTimestamp, c.pod.ResourceVersion, c.pod.CreationTimestamp)
		}
		for _, k := range cachedAnnotations {
			if got.Annotations[k] != c.pod.Annotations[k] {
				t.Errorf("%s: annotation %s = %q, want %q", c.pod.Name, k, got.Annotations[k], c.pod.Annotations[k])
			}
		}
		if view := cp.placed(); view.Seat != c.seatNum {
			t.Errorf("%s: seat %d, want %d", c.pod.Name, view.Seat, c.seatNum)
		}
	}
	if view := trimmed(t, odd).placed(); !view.UnschedulableSince.Equal(odd.Status.Conditions[0].LastTransitionTime.Time) {
		t.Errorf("unschedulable since %v, want %v", view.UnschedulableSince, odd.Status.Conditions[0].LastTransitionTime)
	}
}

func TestPackUUID(t *testing.T) {
	for in, ok := range map[string]bool{
		"0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0": true, "0F1E2D3C-4B5A-6978-8796-A5B4C3D2E1F0": false,
		"00000000-0000-0000-0000-000000000000": false, "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f": false,
		"0f1e2d3c+4b5a-6978-8796-a5b4c3d2e1f0": false, "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1fg": false, "": false,
	} {
		u, packed := packUUID(in)
		if packed != ok || (packed && u.String() != in) {
			t.Errorf("packUUID(%q) = %q, %v; want packed %v", in, u.String(), packed, ok)
		}
	}
}

func TestPackDecimal(t *testing.T) {
	for _, c := range []struct {
		in  string
		max uint64
		ok  bool
	}{{"", 9, true}, {"1", 9, true}, {"9", 9, true}, {"10", 9, false}, {"0", 9, false}, {"01", 9, false}, {"-1", 9, false}, {"+1", 9, false}, {"1x", 9, false}} {
		n, packed := packDecimal(c.in, c.max)
		if packed != c.ok || (packed && formatDecimal(n) != c.in) {
			t.Errorf("packDecimal(%q, %d) = %d, %v; want packed %v", c.in, c.max, n, packed, c.ok)
		}
	}
}

// A pending pod keeps since when it is unschedulable, and why; its value allocates
// nothing.
func TestCachedPodViews(t *testing.T) {
	orig := decodedPod(t, "web-p", 4)
	orig.Spec.NodeName = ""
	orig.Status.Phase = corev1.PodPending
	since := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 9, 0, time.UTC).Local()) // as the decoders make it
	orig.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/3 nodes", LastTransitionTime: since}}
	orig.Spec.NodeSelector = map[string]string{"b": "2", "a": "1", "c": ""}
	cp := trimmed(t, orig)
	view := cp.placed()
	if got, ok := view.UnschedulableFor(); !ok || !got.Equal(since.Time) || view.Phase != corev1.PodPending || view.NodeName != "" || view.IsReady() {
		t.Errorf("view %+v: unschedulable since %v, %v; want %v", view, got, ok, since)
	}
	if got := view.NodeSelector(); !reflect.DeepEqual(got, orig.Spec.NodeSelector) {
		t.Errorf("node selector %v, want %v", got, orig.Spec.NodeSelector)
	}
	if v, ok := view.NodeSelectorLabel("c"); !ok || v != "" {
		t.Errorf(`NodeSelectorLabel("c") = %q, %v`, v, ok)
	}
	if _, ok := view.NodeSelectorLabel("d"); ok {
		t.Error(`NodeSelectorLabel("d") found a label the pod has not`)
	}
	if allocs := testing.AllocsPerRun(100, func() { view = cp.placed() }); allocs != 0 {
		t.Errorf("a view allocates %v times, want 0", allocs)
	}
	if meta := cp.GetObjectMeta(); meta.GetName() != "web-p" || meta.GetNamespace() != testNS || meta.GetResourceVersion() != "42" || meta.GetUID() != orig.UID {
		t.Errorf("object meta %s/%s uid %s rv %s", meta.GetNamespace(), meta.GetName(), meta.GetUID(), meta.GetResourceVersion())
	}
}

// Values kept from EachPodOf stay each pod's own after the next pod is viewed: a view
// whose maps the next pod reused made kept copies read that pod's seat, term it fell
// back from, selector and readiness.
func TestKeptPodsAreTheirOwn(t *testing.T) {
	a := decodedPod(t, "web-a", 1)
	b := decodedPod(t, "web-b", 2)
	b.Annotations[strategy.AnnotationFallbackFrom] = "2"
	b.Spec.NodeSelector = map[string]string{"karpenter.sh/capacity-type": "on-demand"}
	b.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
	caches := syncedCaches(t, append(workloadObjects(burstStrategy), a, b)...)
	kept := map[string]PlacedPod{}
	caches.EachPodOf(Revision{Namespace: testNS, UID: testRSUID}, func(p PlacedPod) { kept[p.Name] = p })
	for _, want := range []*corev1.Pod{a, b} {
		got, ok := kept[want.Name]
		if !ok {
			t.Fatalf("%s not viewed; kept %v", want.Name, kept)
		}
		seat, _ := strategy.SeatOf(want)
		from, _ := strconv.Atoi(want.Annotations[strategy.AnnotationFallbackFrom])
		ready := want.Name == "web-a"
		if got.Seat != seat || got.FallbackFrom != from || !reflect.DeepEqual(got.NodeSelector(), want.Spec.NodeSelector) || got.IsReady() != ready {
			t.Errorf("kept %s: seat %d, from %d, selector %v, ready %v; want %d, %d, %v, %v",
				want.Name, got.Seat, got.FallbackFrom, got.NodeSelector(), got.IsReady(), seat, from, want.Spec.NodeSelector, ready)
		}
	}
}

func TestPositive(t *testing.T) {
	for in, want := range map[string]int{"": 0, "0": 0, "1": 1, "42": 42, "-3": 0, "+3": 0, "x": 0, "1x": 0, "999999999": 999999999, "1000000000": 0} {
		if got := positive(in); got != want {
			t.Errorf("positive(%q) = %d, want %d", in, got, want)
		}
	}
}

// Karpenter's do-not-disrupt survives the trim as a bit: "true" only, as Karpenter
// reads it.
func TestTrimPodKeepsDoNotDisrupt(t *testing.T) {
	for value, want := range map[string]bool{"true": true, "false": false, "": false, "True": false} {
		pod := decodedPod(t, "web-d", 3)
		if value != "" {
			pod.Annotations[karpv1.DoNotDisruptAnnotationKey] = value
		}
		cp := trimmed(t, pod)
		if got := cp.placed().DoNotDisrupt; got != want {
			t.Errorf("do-not-disrupt %q: DoNotDisrupt %v, want %v", value, got, want)
		}
		if got := podOf(cp).Annotations[karpv1.DoNotDisruptAnnotationKey] == "true"; got != want {
			t.Errorf("do-not-disrupt %q: rebuilt pod says %v, want %v", value, got, want)
		}
	}
}
