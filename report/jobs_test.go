package report

import (
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// A running Job of a CronJob is reported with the CronJob's strategy, its finished pods
// not counted; a finished Job is not reported.
func TestBuildJobs(t *testing.T) {
	cj := batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: "demo", UID: "cj",
		Annotations: map[string]string{strategy.AnnotationStrategy: reportStrategy}}}
	owned := []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "CronJob", Name: "nightly", UID: "cj", Controller: ptr.To(true)}}
	running := batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "nightly-1", Namespace: "demo", UID: "job1", OwnerReferences: owned},
		Spec: batchv1.JobSpec{Parallelism: ptr.To[int32](3), Completions: ptr.To[int32](5)}, Status: batchv1.JobStatus{Succeeded: 1}}
	done := batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "nightly-0", Namespace: "demo", UID: "job0", OwnerReferences: owned},
		Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}}}
	pod := func(name string, seat int, capacity string, phase corev1.PodPhase) corev1.Pod {
		p := placedPod(name, "job1", seat, capacity, phase, "n1")
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "nightly-1", UID: "job1", Controller: ptr.To(true)}}
		return p
	}
	st := &State{
		Jobs: []batchv1.Job{running, done}, CronJobs: []batchv1.CronJob{cj},
		Pods: []corev1.Pod{pod("a", 1, "on-demand", corev1.PodRunning), pod("b", 2, "spot", corev1.PodRunning), pod("c", 3, "spot", corev1.PodRunning),
			pod("finished", 2, "spot", corev1.PodSucceeded)},
	}
	r := Build(st, func(string, string) bool { return true })
	if len(r.Workloads) != 1 {
		t.Fatalf("want the running Job only, got %+v", r.Workloads)
	}
	w := r.Workloads[0]
	if w.Kind != "Job" || w.Name != "nightly-1" || w.Source != "CronJob demo/nightly" || w.Replicas != 3 || !w.Exact {
		t.Fatalf("workload: %+v", w)
	}
	if w.Terms[0].Placed != 1 || w.Terms[1].Placed != 2 {
		t.Fatalf("terms: %+v", w.Terms)
	}
}
