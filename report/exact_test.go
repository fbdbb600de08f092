package report

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// TestSpreadJudgesAsTheLoopAndPolicyStatus holds "exact" to one definition: the same
// pods judged as spread reads them (Build, from pods listed live) and as the
// convergence loop and the policy status read them (clusterview.Judge, from the pod
// cache's PlacedPod) give the same state and reason. A tally that drifts (a kind of pod
// one counts and the other does not) fails here.
func TestSpreadJudgesAsTheLoopAndPolicyStatus(t *testing.T) {
	s, err := strategy.Parse(reportStrategy)
	if err != nil {
		t.Fatal(err)
	}
	onTarget := func() []corev1.Pod {
		return []corev1.Pod{
			placedPod("p1", "new", 1, "on-demand", corev1.PodRunning, "n1"),
			placedPod("p2", "new", 2, "spot", corev1.PodRunning, "n2"),
			placedPod("p3", "new", 3, "spot", corev1.PodPending, ""),
		}
	}
	cannotRun := onTarget()
	cannotRun[2].Annotations[strategy.AnnotationCannotRun] = "term 2 offers arm64; the images support amd64"
	terminating := append(onTarget(), placedPod("p4", "new", 4, "spot", corev1.PodRunning, "n2"))
	terminating[3].DeletionTimestamp = &metav1.Time{}
	offTerms := onTarget()
	offTerms[1].Spec.NodeSelector = map[string]string{"capacity": "gpu"}
	for name, pods := range map[string][]corev1.Pod{
		"on target":            onTarget(),
		"one short":            onTarget()[:2],
		"one unplaced surplus": append(onTarget(), placedPod("u1", "new", 0, "", corev1.PodRunning, "n2")),
		"one unplaced, short":  append(onTarget()[:2], placedPod("u1", "new", 0, "", corev1.PodRunning, "n2")),
		"images cannot run":    cannotRun,
		"terminating surplus":  terminating,
		"seat on no term":      offTerms,
		"finished surplus":     append(onTarget(), placedPod("done", "new", 4, "spot", corev1.PodSucceeded, "n2")),
		"seat above replicas":  append(onTarget(), placedPod("p4", "new", 4, "spot", corev1.PodRunning, "n2")),
		"on the wrong term":    append(onTarget()[:2], placedPod("p3", "new", 3, "on-demand", corev1.PodRunning, "n1")),
	} {
		t.Run(name, func(t *testing.T) {
			st := &State{
				ReplicaSets: []appsv1.ReplicaSet{{
					ObjectMeta: metav1.ObjectMeta{Name: "rs", Namespace: "demo", UID: "new", Annotations: map[string]string{strategy.AnnotationStrategy: reportStrategy}},
					Spec:       appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](3)},
				}},
				Pods: pods,
			}
			r := Build(st, func(string, string) bool { return true })
			if len(r.Workloads) != 1 {
				t.Fatalf("workloads: %+v", r.Workloads)
			}
			spread := r.Workloads[0]
			cached := clusterview.Judge(s, 3, func(fn func(clusterview.PlacedPod)) {
				for i := range pods {
					fn(clusterview.PlacedPodOf(&pods[i]))
				}
			}, strategy.Conditions{})
			if spread.State != string(cached.State) || spread.Why != cached.Why {
				t.Fatalf("spread says %s (%s); the loop and the policy status say %s (%s)", spread.State, spread.Why, cached.State, cached.Why)
			}
		})
	}
}
