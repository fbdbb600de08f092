package clusterview

import (
	"encoding/json"
	"reflect"
	"strconv"
	"testing"
	"time"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

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

func trimmed(t *testing.T, in *interner, pod *corev1.Pod) *cachedPod {
	t.Helper()
	obj, err := trimPod(in, pod)
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
	in := newInterner()
	orig := decodedPod(t, "web-a", 3)
	cp := trimmed(t, in, orig)
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
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, Reason: "r", LastTransitionTime: orig.CreationTimestamp},
		}},
	}
	if !reflect.DeepEqual(pod, want) {
		t.Errorf("cached pod\n%+v\nwant\n%+v", pod, want)
	}

	// An object trimmed already (a relist's Replace) comes back as is.
	if again, err := trimPod(in, cp); err != nil || again != any(cp) {
		t.Errorf("trimPod of a cached pod = %v, %v", again, err)
	}
}

func TestTrimPodSharesWhatPodsHaveInCommon(t *testing.T) {
	in := newInterner()
	a, b := trimmed(t, in, decodedPod(t, "web-a", 1)), trimmed(t, in, decodedPod(t, "web-b", 2))
	same := func(what string, x, y string) {
		t.Helper()
		if x != y || unsafe.StringData(x) != unsafe.StringData(y) {
			t.Errorf("%s not shared: %q and %q", what, x, y)
		}
	}
	same("namespace", a.Namespace, b.Namespace)
	same("node name", a.nodeName, b.nodeName)
	same("phase", string(a.phase), string(b.phase))
	same("term annotation", a.Annotations[strategy.AnnotationTerm], b.Annotations[strategy.AnnotationTerm])
	same("condition reason", a.conditions[0].Reason, b.conditions[0].Reason)
	if &a.OwnerReferences[0] != &b.OwnerReferences[0] {
		t.Error("controller reference not shared")
	}
	if reflect.ValueOf(a.nodeSelector).UnsafePointer() != reflect.ValueOf(b.nodeSelector).UnsafePointer() {
		t.Error("node selector not shared")
	}
	if a.Name == b.Name || a.Annotations[strategy.AnnotationSeat] == b.Annotations[strategy.AnnotationSeat] {
		t.Error("the pods' own values got mixed up")
	}
}

func TestInternerIsBounded(t *testing.T) {
	in := newInterner()
	for i := range 3 * maxInterned {
		in.string(strconv.Itoa(i))
		in.selector(map[string]string{"k": strconv.Itoa(i)})
		in.controllerRef(&metav1.OwnerReference{Name: strconv.Itoa(i)})
	}
	if len(in.strings) > maxInterned || len(in.selectors) > maxInterned || len(in.owners) > maxInterned {
		t.Errorf("interner holds %d strings, %d selectors, %d owners; want at most %d each", len(in.strings), len(in.selectors), len(in.owners), maxInterned)
	}
}
