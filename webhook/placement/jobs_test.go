package placement

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook/internal/webhooktest"
)

func jobRef(kind, name string, uid string) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "batch/v1", Kind: kind, Name: name, UID: types.UID(uid), Controller: ptr.To(true)}
}

// An Indexed Job's pod takes seat index + 1, whatever else runs: a retried index lands
// on the term of the pod it replaces. No deletion cost (the Job controller ignores it)
// and no reservation (the ledger is not asked).
func TestIndexedJobSeatIsIndex(t *testing.T) {
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "batch", Namespace: testNS, UID: "job-uid-1",
		Annotations: map[string]string{strategy.AnnotationStrategy: seedStrategy}},
		Spec: batchv1.JobSpec{CompletionMode: ptr.To(batchv1.IndexedCompletion), Parallelism: ptr.To(int32(3)), Completions: ptr.To(int32(10))}}
	m, _, _ := (&cluster{objects: []runtime.Object{job}}).mutator(t)
	s, _ := strategy.Parse(seedStrategy)
	for _, index := range []int{4, 0, 4, 9} {
		pod := webhooktest.RSPod(testNS, testRSUID)
		pod.OwnerReferences = []metav1.OwnerReference{jobRef("Job", "batch", "job-uid-1")}
		pod.Annotations = map[string]string{batchv1.JobCompletionIndexAnnotation: fmt.Sprint(index)}
		req := webhooktest.CreateRequest(t, pod)
		got := applyPatch(t, req, m.Admit(context.Background(), req))
		if seat, _ := strategy.SeatOf(got); seat != index+1 {
			t.Errorf("index %d got seat %d", index, seat)
		}
		if want := s.Terms[s.TermOfSeat(index+1)].LabelMap(); !reflect.DeepEqual(got.Spec.NodeSelector, want) {
			t.Errorf("index %d: nodeSelector %v, want %v", index, got.Spec.NodeSelector, want)
		}
		for _, k := range []string{strategy.AnnotationDeletionCost, strategy.AnnotationReservation} {
			if _, ok := got.Annotations[k]; ok {
				t.Errorf("index %d: an Indexed Job's pod carries %s", index, k)
			}
		}
	}
}

// A CronJob's Job takes the CronJob's strategy; its pods take the ledger's lowest free
// seats, as a ReplicaSet's do.
func TestCronJobStrategyReachesItsJobs(t *testing.T) {
	cj := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: testNS, UID: "cj-uid-1",
		Annotations: map[string]string{strategy.AnnotationStrategy: burstStrategy}}}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "nightly-1", Namespace: testNS, UID: "job-uid-2",
		OwnerReferences: []metav1.OwnerReference{jobRef("CronJob", "nightly", "cj-uid-1")}},
		Spec: batchv1.JobSpec{Parallelism: ptr.To(int32(4))}}
	m, _, _ := (&cluster{objects: []runtime.Object{cj, job}}).mutator(t)
	s, _ := strategy.Parse(burstStrategy)
	for i := 1; i <= 4; i++ {
		pod := webhooktest.RSPod(testNS, testRSUID)
		pod.OwnerReferences = []metav1.OwnerReference{jobRef("Job", "nightly-1", "job-uid-2")}
		req := webhooktest.CreateRequest(t, pod)
		got := applyPatch(t, req, m.Admit(context.Background(), req))
		if seat, _ := strategy.SeatOf(got); seat != i {
			t.Errorf("pod %d got seat %d", i, seat)
		}
		if want := s.Terms[s.TermOfSeat(i)].LabelMap(); !reflect.DeepEqual(got.Spec.NodeSelector, want) {
			t.Errorf("pod %d: nodeSelector %v, want %v", i, got.Spec.NodeSelector, want)
		}
		if _, ok := got.Annotations[strategy.AnnotationDeletionCost]; ok {
			t.Errorf("pod %d: a Job's pod needs no deletion cost", i)
		}
	}
}
