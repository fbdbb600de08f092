package placement

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook"
)

// The pure placement decision, case by case as the handler tests exercise it, without
// HTTP, ledger or caches.
func TestDecide(t *testing.T) {
	deployment := &clusterview.Workload{Ref: corev1.ObjectReference{Kind: "Deployment", Namespace: "demo", Name: "web"}, Revision: "rs-uid"}
	statefulSet := &clusterview.Workload{Ref: corev1.ObjectReference{Kind: "StatefulSet", Namespace: "demo", Name: "db"}, Revision: "sts-uid", StatefulSet: &appsv1.StatefulSet{}}
	spotTaint := corev1.Toleration{Key: "capacity", Operator: corev1.TolerationOpEqual, Value: "spot", Effect: corev1.TaintEffectNoSchedule}
	own := corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpExists}
	withPod := func(edit func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "demo"}}
		if edit != nil {
			edit(p)
		}
		return p
	}
	for _, tc := range []struct {
		name        string
		strategy    string
		pod         *corev1.Pod
		workload    *clusterview.Workload
		seat        int
		unavailable map[int]string
		capacity    Capacity

		outcome     string
		selector    map[string]string // wanted nodeSelector of the patched pod
		annotations map[string]string // wanted annotations ("" value: must be absent)
		tolerations []corev1.Toleration
		warning     string // in some warning
		event       string // reason of an Event
		unserved    bool
	}{
		{
			name: "first seat of a Deployment", strategy: seedStrategy, pod: withPod(nil), workload: deployment, seat: 1,
			outcome: webhook.OutcomePlaced, selector: map[string]string{"nodesize": "od4vcpu16gb"},
			annotations: map[string]string{strategy.AnnotationSeat: "1", strategy.AnnotationTerm: "1", strategy.AnnotationDeletionCost: "-1", strategy.AnnotationReservation: "admission-uid", strategy.AnnotationFallbackFrom: ""},
		},
		{
			name: "second seat goes to the later of two tied terms", strategy: seedStrategy, pod: withPod(nil), workload: deployment, seat: 2,
			outcome: webhook.OutcomePlaced, selector: map[string]string{"nodesize": "spot8vcpu32gb"},
			annotations: map[string]string{strategy.AnnotationSeat: "2", strategy.AnnotationTerm: "3", strategy.AnnotationDeletionCost: "-2"},
		},
		{
			name: "own nodeSelector keys and tolerations are kept, covered tolerations not added", strategy: "capacity=spot", workload: deployment, seat: 1,
			pod: withPod(func(p *corev1.Pod) {
				p.Spec.NodeSelector = map[string]string{"zone": "a"}
				p.Spec.Tolerations = []corev1.Toleration{own}
			}),
			capacity: fakeCapacity{served: true, tolerations: []corev1.Toleration{spotTaint, {Key: "dedicated", Operator: corev1.TolerationOpExists}}},
			outcome:  webhook.OutcomePlaced, selector: map[string]string{"zone": "a", "capacity": "spot"},
			tolerations: []corev1.Toleration{own, spotTaint},
		},
		{
			name: "the template's deletion cost is kept", strategy: "capacity=spot", workload: deployment, seat: 3,
			pod:     withPod(func(p *corev1.Pod) { p.Annotations = map[string]string{strategy.AnnotationDeletionCost: "100"} }),
			outcome: webhook.OutcomePlaced, annotations: map[string]string{strategy.AnnotationDeletionCost: "100", strategy.AnnotationSeat: "3"},
		},
		{
			name: "StatefulSet pods get neither deletion cost nor reservation", strategy: "capacity=spot", pod: withPod(nil), workload: statefulSet, seat: 4,
			outcome: webhook.OutcomePlaced, annotations: map[string]string{strategy.AnnotationSeat: "4", strategy.AnnotationDeletionCost: "", strategy.AnnotationReservation: ""},
		},
		{
			name: "a conflicting nodeSelector leaves the pod alone", strategy: "capacity=spot", workload: deployment, seat: 1,
			pod:     withPod(func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"capacity": "on-demand"} }),
			outcome: webhook.OutcomeConflict, warning: `capacity is "on-demand", the term wants "spot"`, event: ReasonNodeSelectorConflict,
		},
		{
			name: "an unserved term is placed with a warning", strategy: "capacity=spot", pod: withPod(nil), workload: deployment, seat: 1,
			capacity: fakeCapacity{served: false},
			outcome:  webhook.OutcomePlaced, selector: map[string]string{"capacity": "spot"},
			warning: "served by no NodePool", event: ReasonUnservedTerm, unserved: true,
		},
		{
			name: "an unavailable term's seat goes to the fallback", strategy: seedStrategy, pod: withPod(nil), workload: deployment, seat: 2,
			unavailable: map[int]string{2: "pods unschedulable"},
			outcome:     webhook.OutcomePlaced, selector: map[string]string{"nodesize": "spot4vcpu16gb"},
			annotations: map[string]string{strategy.AnnotationTerm: "2", strategy.AnnotationFallbackFrom: "3"},
			warning:     "placed on term 2",
		},
		{
			name: "with no term to fall back to, the seat stays on its own", strategy: "capacity=spot", pod: withPod(nil), workload: deployment, seat: 1,
			unavailable: map[int]string{0: "pods unschedulable"},
			outcome:     webhook.OutcomePlaced, selector: map[string]string{"capacity": "spot"},
			annotations: map[string]string{strategy.AnnotationFallbackFrom: ""},
			warning:     "placed on it anyway",
		},
		{
			name: "a seat beyond the sequence is refused", strategy: "capacity=spot", pod: withPod(nil), workload: statefulSet, seat: math.MaxInt32 + 1,
			outcome: webhook.OutcomeError, warning: "pod not placed",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := strategy.Parse(tc.strategy)
			if err != nil {
				t.Fatal(err)
			}
			d := decide(decisionInput{Pod: tc.pod, Workload: tc.workload, Strategy: s, Seat: tc.seat, Unavailable: tc.unavailable, Capacity: tc.capacity, Admission: "admission-uid"})
			if d.Outcome != tc.outcome || d.Unserved != tc.unserved {
				t.Fatalf("outcome %s, unserved %v; want %s, %v (warnings %q)", d.Outcome, d.Unserved, tc.outcome, tc.unserved, d.Warnings)
			}
			if tc.warning != "" && !strings.Contains(strings.Join(d.Warnings, "\n"), tc.warning) {
				t.Errorf("warnings %q lack %q", d.Warnings, tc.warning)
			}
			if tc.event != "" && (len(d.Events) == 0 || d.Events[len(d.Events)-1][0] != tc.event) {
				t.Errorf("events %q, want one %s", d.Events, tc.event)
			}
			if d.Outcome != webhook.OutcomePlaced {
				if d.Patch != nil {
					t.Errorf("a pod left alone has a patch: %s", d.Patch)
				}
				return
			}
			got := patched(t, tc.pod, d.Patch)
			for k, v := range tc.selector {
				if got.Spec.NodeSelector[k] != v {
					t.Errorf("nodeSelector %v, want %s=%s", got.Spec.NodeSelector, k, v)
				}
			}
			for k, v := range tc.annotations {
				if have, ok := got.Annotations[k]; (v == "" && ok) || (v != "" && have != v) {
					t.Errorf("annotation %s is %q (set %v), want %q", k, have, ok, v)
				}
			}
			if got.Labels[strategy.LabelManaged] != "true" {
				t.Errorf("labels %v lack the managed label", got.Labels)
			}
			if tc.tolerations != nil {
				if have, _ := json.Marshal(got.Spec.Tolerations); string(have) != string(must(json.Marshal(tc.tolerations))) {
					t.Errorf("tolerations %s, want %s", have, must(json.Marshal(tc.tolerations)))
				}
			}
		})
	}
}

// patched applies a decision's JSON patch to pod.
func patched(t *testing.T, pod *corev1.Pod, patch []byte) *corev1.Pod {
	t.Helper()
	raw := must(json.Marshal(pod))
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		t.Fatalf("decode patch %s: %v", patch, err)
	}
	out, err := p.Apply(raw)
	if err != nil {
		t.Fatalf("apply patch %s: %v", patch, err)
	}
	var got corev1.Pod
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	return &got
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
