package plan

import (
	"context"
	"strconv"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	dynfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// A live Job of a CronJob that carries the strategy: plan --cluster counts the Job's
// placed pods as spread does (it said "nothing counted as placed" for any Job).
func TestLiveJobOfACronJobCountsItsPods(t *testing.T) {
	const strat = "capacity=on-demand,base=1:capacity=spot"
	ref := func(apiVersion, kind, name, uid string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: name, UID: types.UID(uid), Controller: ptr.To(true)}}
	}
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"batch.kubernetes.io/controller-uid": "job"}}
	cj := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: "etl", UID: "cj",
		Annotations: map[string]string{strategy.AnnotationStrategy: strat}}}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "nightly-1", Namespace: "etl", UID: "job", OwnerReferences: ref("batch/v1", "CronJob", "nightly", "cj")},
		Spec: batchv1.JobSpec{Parallelism: ptr.To[int32](3), Completions: ptr.To[int32](3), Selector: sel}}
	objs := []runtime.Object{cj, job}
	for seat, capacity := range map[int]string{1: "on-demand", 2: "spot", 3: "spot"} {
		objs = append(objs, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "nightly-1-" + strconv.Itoa(seat), Namespace: "etl", Labels: sel.MatchLabels,
				Annotations: map[string]string{strategy.AnnotationSeat: strconv.Itoa(seat)}, OwnerReferences: ref("batch/v1", "Job", "nightly-1", "job")},
			Spec:   corev1.PodSpec{NodeName: "n", NodeSelector: map[string]string{"capacity": capacity}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning},
		})
	}
	client := fake.NewClientset(objs...)
	dyn := dynfake.NewSimpleDynamicClient(runtime.NewScheme())
	s, err := strategy.Parse(strat)
	if err != nil {
		t.Fatal(err)
	}
	var c Capacity
	placed, err := live(context.Background(), client, dyn, s, Options{Kind: "Job", Namespace: "etl", Name: "nightly-1"}, &c)
	if err != nil {
		t.Fatalf("live Job of a CronJob: %v", err)
	}
	if len(placed) != 2 || placed[0] != 1 || placed[1] != 2 {
		t.Fatalf("placed per term %v, want [1 2]", placed)
	}
	if _, err := live(context.Background(), client, dyn, s, Options{Kind: "CronJob", Namespace: "etl", Name: "nightly"}, &c); err == nil {
		t.Fatal("a CronJob's pods are counted per Job, want an error naming that")
	}
}
