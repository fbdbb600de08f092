package placement

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook/internal/webhooktest"
)

func TestPlacesSeedDeploymentInOrder(t *testing.T) {
	m, _, _ := newCluster(seedStrategy).mutator(t)
	s, _ := strategy.Parse(seedStrategy)
	counts := make([]int, 3)
	for i := 1; i <= 10; i++ {
		req := webhooktest.CreateRequest(t, webhooktest.RSPod(testNS, testRSUID))
		resp := m.Admit(context.Background(), req)
		pod := applyPatch(t, req, resp)
		seat, _ := strategy.SeatOf(pod)
		if seat != i {
			t.Fatalf("pod %d got seat %d", i, seat)
		}
		term := s.TermOfSeat(seat)
		if got, want := pod.Spec.NodeSelector, s.Terms[term].LabelMap(); !reflect.DeepEqual(got, want) {
			t.Fatalf("seat %d: nodeSelector %v, want %v", seat, got, want)
		}
		if got := pod.Annotations[strategy.AnnotationTerm]; got != strconv.Itoa(term+1) {
			t.Errorf("seat %d: term annotation %q, want %d", seat, got, term+1)
		}
		if got := pod.Annotations[strategy.AnnotationDeletionCost]; got != strconv.Itoa(-seat) {
			t.Errorf("seat %d: deletion cost %q, want %d", seat, got, -seat)
		}
		if pod.Labels[strategy.LabelManaged] != "true" || pod.Labels["app"] != "web" {
			t.Errorf("labels not merged: %v", pod.Labels)
		}
		counts[term]++
	}
	if want := []int{1, 4, 5}; !reflect.DeepEqual(counts, want) {
		t.Fatalf("10 pods spread %v, want %v", counts, want)
	}
}

func TestSkips(t *testing.T) {
	m, _, _ := newCluster(burstStrategy).mutator(t)
	cases := map[string]func(*admissionv1.AdmissionRequest){
		"UPDATE": func(r *admissionv1.AdmissionRequest) { r.Operation = admissionv1.Update },
		"DELETE": func(r *admissionv1.AdmissionRequest) { r.Operation = admissionv1.Delete },
		"blocklisted namespace": func(r *admissionv1.AdmissionRequest) {
			r.Namespace = "blocked"
		},
		"webhook's own namespace": func(r *admissionv1.AdmissionRequest) {
			r.Namespace = "custom-kube-scheduler-webhook"
		},
		"subresource": func(r *admissionv1.AdmissionRequest) { r.SubResource = "status" },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			req := webhooktest.CreateRequest(t, webhooktest.RSPod(testNS, testRSUID))
			mutate(req)
			expectUnchanged(t, m.Admit(context.Background(), req), "")
		})
	}
	podCases := map[string]func(*corev1.Pod){
		"DaemonSet pod": func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{controllerRef("DaemonSet", "agent", "ds-uid")}
			p.Annotations = map[string]string{strategy.AnnotationStrategy: burstStrategy}
		},
		"mirror pod": func(p *corev1.Pod) {
			p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"}
		},
		"bare pod with no strategy": func(p *corev1.Pod) { p.OwnerReferences = nil },
		"strategy switched off": func(p *corev1.Pod) {
			p.Annotations = map[string]string{strategy.AnnotationOptIn: "false"}
		},
	}
	for name, mutate := range podCases {
		t.Run(name, func(t *testing.T) {
			pod := webhooktest.RSPod(testNS, testRSUID)
			mutate(pod)
			expectUnchanged(t, m.Admit(context.Background(), webhooktest.CreateRequest(t, pod)), "")
		})
	}
	t.Run("bare pod with a strategy is left alone with a warning", func(t *testing.T) {
		pod := webhooktest.RSPod(testNS, testRSUID)
		pod.OwnerReferences = nil
		pod.Annotations = map[string]string{strategy.AnnotationStrategy: burstStrategy}
		expectUnchanged(t, m.Admit(context.Background(), webhooktest.CreateRequest(t, pod)), "bare pod")
	})
	t.Run("pod of a Job that does not exist is left alone with a warning", func(t *testing.T) {
		pod := webhooktest.RSPod(testNS, testRSUID)
		pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "j", UID: "job", Controller: ptr.To(true)}}
		pod.Annotations = map[string]string{strategy.AnnotationStrategy: burstStrategy}
		expectUnchanged(t, m.Admit(context.Background(), webhooktest.CreateRequest(t, pod)), `Job shop/j`)
	})
	t.Run("workload without a strategy", func(t *testing.T) {
		m, _, _ := newAnnotatedCluster(nil).mutator(t)
		expectUnchanged(t, m.Admit(context.Background(), webhooktest.CreateRequest(t, webhooktest.RSPod(testNS, testRSUID))), "")
	})
}

func TestMergesNodeSelectorAndTolerations(t *testing.T) {
	m, _, _ := newCluster(burstStrategy).mutator(t)
	m.Capacity = fakeCapacity{tolerations: []corev1.Toleration{
		{Key: "karpenter.sh/capacity-type", Operator: corev1.TolerationOpEqual, Value: "on-demand", Effect: corev1.TaintEffectNoSchedule},
		{Key: "dedicated", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: "team", Operator: corev1.TolerationOpEqual, Value: "a", Effect: corev1.TaintEffectNoSchedule},
	}, served: true}
	pod := webhooktest.RSPod(testNS, testRSUID)
	pod.Spec.NodeSelector = map[string]string{"kubernetes.io/arch": "arm64", "karpenter.sh/capacity-type": "on-demand"}
	pod.Spec.Tolerations = []corev1.Toleration{{Key: "team", Operator: corev1.TolerationOpExists}}
	pod.Annotations = map[string]string{"keep": "me"}
	req := webhooktest.CreateRequest(t, pod)
	resp := m.Admit(context.Background(), req)
	got := applyPatch(t, req, resp)
	want := map[string]string{"kubernetes.io/arch": "arm64", "karpenter.sh/capacity-type": "on-demand"}
	if !reflect.DeepEqual(got.Spec.NodeSelector, want) {
		t.Errorf("nodeSelector %v, want %v", got.Spec.NodeSelector, want)
	}
	wantTols := []corev1.Toleration{
		{Key: "team", Operator: corev1.TolerationOpExists},
		{Key: "karpenter.sh/capacity-type", Operator: corev1.TolerationOpEqual, Value: "on-demand", Effect: corev1.TaintEffectNoSchedule},
		{Key: "dedicated", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
	}
	if !reflect.DeepEqual(got.Spec.Tolerations, wantTols) {
		t.Errorf("tolerations %+v, want %+v", got.Spec.Tolerations, wantTols)
	}
	if got.Annotations["keep"] != "me" || got.Annotations[strategy.AnnotationSeat] != "1" {
		t.Errorf("annotations not merged: %v", got.Annotations)
	}
	// "/" in keys is escaped as ~1, and no op replaces a whole existing map.
	var ops []patchOp
	if err := json.Unmarshal(resp.Patch, &ops); err != nil {
		t.Fatal(err)
	}
	for _, op := range ops {
		if op.Op != "add" || op.Path == "/spec/nodeSelector" || op.Path == "/metadata/annotations" || op.Path == "/metadata/labels" || op.Path == "/spec/tolerations" {
			t.Errorf("op %+v replaces a whole map or list", op)
		}
	}
	if !strings.Contains(string(resp.Patch), `"/metadata/annotations/custom-kube-scheduler-webhook.io~1seat"`) {
		t.Errorf("seat annotation path not escaped: %s", resp.Patch)
	}
}

func TestTemplateDeletionCostIsKept(t *testing.T) {
	m, _, _ := newCluster(burstStrategy).mutator(t)
	pod := webhooktest.RSPod(testNS, testRSUID)
	pod.Annotations = map[string]string{strategy.AnnotationDeletionCost: "100"}
	req := webhooktest.CreateRequest(t, pod)
	if got := applyPatch(t, req, m.Admit(context.Background(), req)); got.Annotations[strategy.AnnotationDeletionCost] != "100" {
		t.Fatalf("the template's own deletion cost was changed: %v", got.Annotations)
	}
}

func TestConflictingNodeSelector(t *testing.T) {
	m, recorder, ledger := newCluster(burstStrategy).mutator(t)
	pod := webhooktest.RSPod(testNS, testRSUID)
	pod.Spec.NodeSelector = map[string]string{"karpenter.sh/capacity-type": "spot"} // seat 1 is on-demand
	resp := m.Admit(context.Background(), webhooktest.CreateRequest(t, pod))
	expectUnchanged(t, resp, `karpenter.sh/capacity-type is "spot", the term wants "on-demand"`)
	expectEvent(t, recorder, ReasonNodeSelectorConflict)
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return firstSeatFree(ledger), nil
	}); err != nil {
		t.Fatalf("the conflicting pod's seat was not released: %v", err)
	}
	// The seat goes to the next pod.
	req := webhooktest.CreateRequest(t, webhooktest.RSPod(testNS, testRSUID))
	if seat, _ := strategy.SeatOf(applyPatch(t, req, m.Admit(context.Background(), req))); seat != 1 {
		t.Fatalf("next pod got seat %d, want 1", seat)
	}
}

func TestReinvocationIsNoOp(t *testing.T) {
	m, _, _ := newCluster(burstStrategy).mutator(t)
	req := webhooktest.CreateRequest(t, webhooktest.RSPod(testNS, testRSUID))
	placed := applyPatch(t, req, m.Admit(context.Background(), req))
	again := webhooktest.CreateRequest(t, placed)
	expectUnchanged(t, m.Admit(context.Background(), again), "")
}

func TestDryRunReservesNothing(t *testing.T) {
	m, recorder, ledger := newCluster(burstStrategy).mutator(t)
	for range 3 {
		req := webhooktest.CreateRequest(t, webhooktest.RSPod(testNS, testRSUID))
		req.DryRun = ptr.To(true)
		pod := applyPatch(t, req, m.Admit(context.Background(), req))
		if seat, _ := strategy.SeatOf(pod); seat != 1 || pod.Spec.NodeSelector["karpenter.sh/capacity-type"] != "on-demand" {
			t.Fatalf("dry-run got seat %d, nodeSelector %v; want the patch seat 1 would get", seat, pod.Spec.NodeSelector)
		}
	}
	if !firstSeatFree(ledger) {
		t.Fatal("dry-run reserved a seat")
	}
	if len(recorder.Events) != 0 {
		t.Fatalf("dry-run recorded an event")
	}
}

func TestRetriedAdmissionKeepsItsSeat(t *testing.T) {
	m, _, _ := newCluster(burstStrategy).mutator(t)
	req := webhooktest.CreateRequest(t, webhooktest.RSPod(testNS, testRSUID))
	first, _ := strategy.SeatOf(applyPatch(t, req, m.Admit(context.Background(), req)))
	second, _ := strategy.SeatOf(applyPatch(t, req, m.Admit(context.Background(), req)))
	if first != 1 || second != 1 {
		t.Fatalf("the same admission UID got seats %d and %d", first, second)
	}
}

func TestStatefulSetSeatIsOrdinal(t *testing.T) {
	m, _, _ := newCluster(seedStrategy).mutator(t)
	s, _ := strategy.Parse(seedStrategy)
	for _, ordinal := range []int{4, 0, 9} {
		pod := webhooktest.RSPod(testNS, testRSUID)
		pod.GenerateName, pod.Name = "", fmt.Sprintf("db-%d", ordinal)
		pod.OwnerReferences = []metav1.OwnerReference{controllerRef("StatefulSet", "db", testStatefulUID)}
		req := webhooktest.CreateRequest(t, pod)
		got := applyPatch(t, req, m.Admit(context.Background(), req))
		if seat, _ := strategy.SeatOf(got); seat != ordinal+1 {
			t.Errorf("db-%d got seat %d", ordinal, seat)
		}
		if want := s.Terms[s.TermOfSeat(ordinal+1)].LabelMap(); !reflect.DeepEqual(got.Spec.NodeSelector, want) {
			t.Errorf("db-%d: nodeSelector %v, want %v", ordinal, got.Spec.NodeSelector, want)
		}
		if _, ok := got.Annotations[strategy.AnnotationDeletionCost]; ok {
			t.Errorf("db-%d: a StatefulSet pod needs no deletion cost", ordinal)
		}
	}
}

func TestUnservedTermWarnsButPlaces(t *testing.T) {
	m, recorder, _ := newCluster(burstStrategy).mutator(t)
	m.Capacity = fakeCapacity{served: false}
	req := webhooktest.CreateRequest(t, webhooktest.RSPod(testNS, testRSUID))
	resp := m.Admit(context.Background(), req)
	applyPatch(t, req, resp)
	if len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "served by no NodePool") {
		t.Fatalf("warnings %v", resp.Warnings)
	}
	expectEvent(t, recorder, ReasonUnservedTerm)
}

// Malformed annotations: each is admitted unchanged, with a warning
// naming the fault, and an Event on the workload.
func TestMalformedStrategies(t *testing.T) {
	cases := []struct{ raw, fault string }{
		{"", "value is empty"},
		{"   ", "value is empty"},
		{":", `term 1 (""): term is empty`},
		{":::", "term is empty"},
		{"nodesize", `part "nodesize" is not key=value`},
		{"nodesize=a,spot", `part "spot" is not key=value`},
		{"a=1,base=-2", `base "-2" is not a non-negative integer`},
		{"a=1,weight=-1", `weight "-1" is not a non-negative integer`},
		{"a=1:b=1,weight=x", `term 2 ("b=1,weight=x"): weight "x" is not a non-negative integer`},
		{"a=1,weight=1.5", `weight "1.5" is not a non-negative integer`},
		{"a=1,base=99999999999999999999", "larger than 100000"},
		{"a=1,weight=1001", "larger than 1000"},
		{"a=1,base=100001", "larger than 100000"},
		{"a=1,a=2", `label key "a" is given twice`},
		{"a=1,weight=1,weight=2", "weight is given twice"},
		{"a=1,Weight=2", `"weight" is reserved`},
		{"bad key=1", `label key "bad key" is invalid`},
		{"-a=1", `label key "-a" is invalid`},
		{"a=not valid", `label value "not valid" of "a" is invalid`},
		{"a=" + strings.Repeat("x", 64), "label value"},
		{"base=1", "term has no node label"},
		{"a=1,base=2:b=1,base=1", "every term has weight 0"},
		{"a=1,weight=0:b=1,weight=0", "every term has weight 0"},
		{strings.TrimSuffix(strings.Repeat("a=1:", 21), ":"), "21 terms"},
		{"größe=groß", "label key"},
		{"a=spöt", "label value"},
		{"a=1,,b=2", "empty part"},
		{strings.Repeat("k=v,", 3000), "bytes long"},
		{"a=1\x00", "label value"},
	}
	if len(cases) < 25 {
		t.Fatalf("only %d cases", len(cases))
	}
	for _, c := range cases {
		t.Run(c.raw[:min(len(c.raw), 30)], func(t *testing.T) {
			m, recorder, _ := newCluster(c.raw).mutator(t)
			resp := m.Admit(context.Background(), webhooktest.CreateRequest(t, webhooktest.RSPod(testNS, testRSUID)))
			expectUnchanged(t, resp, c.fault)
			if !strings.Contains(resp.Warnings[0], "on Deployment shop/web is invalid") {
				t.Errorf("warning does not name the workload: %q", resp.Warnings[0])
			}
			expectEvent(t, recorder, ReasonInvalidStrategy)
		})
	}
}

type fakeCapacity struct {
	tolerations []corev1.Toleration
	served      bool
}

func (f fakeCapacity) Tolerations(map[string]string) ([]corev1.Toleration, bool) {
	return f.tolerations, f.served
}

// expectUnchanged asserts an allowed response without patch; warning, if not empty,
// must appear in one of its warnings.
func expectUnchanged(t *testing.T, resp *admissionv1.AdmissionResponse, warning string) {
	t.Helper()
	if !resp.Allowed || resp.Patch != nil || resp.PatchType != nil {
		t.Fatalf("want allowed without patch, got %+v (patch %s)", resp, resp.Patch)
	}
	if warning == "" {
		if len(resp.Warnings) != 0 {
			t.Fatalf("unexpected warnings %v", resp.Warnings)
		}
		return
	}
	for _, w := range resp.Warnings {
		if strings.Contains(w, warning) && strings.HasPrefix(w, "custom-kube-scheduler-webhook: ") {
			return
		}
	}
	t.Fatalf("no warning mentions %q: %v", warning, resp.Warnings)
}

func expectEvent(t *testing.T, recorder *record.FakeRecorder, reason string) {
	t.Helper()
	select {
	case e := <-recorder.Events:
		if !strings.Contains(e, reason) {
			t.Fatalf("event %q, want reason %s", e, reason)
		}
	default:
		t.Fatalf("no %s event recorded", reason)
	}
}

// BenchmarkAdmit measures one pod admission end to end in process: decode, owner
// lookup in the informer caches, seat claim, patch. Each claim is released so the seat
// stays low and iterations stay comparable.
func BenchmarkAdmit(b *testing.B) {
	m, _, _ := newCluster(burstStrategy).mutator(b)
	req := webhooktest.CreateRequest(b, webhooktest.RSPod(testNS, testRSUID))
	b.ReportAllocs()
	for b.Loop() {
		req.UID = uuid.NewUUID()
		resp := m.Admit(context.Background(), req)
		if resp.Patch == nil {
			b.Fatal("not placed")
		}
		m.Ledger.Release(context.Background(), clusterview.Revision{Namespace: testNS, UID: testRSUID}, req.UID)
	}
}
