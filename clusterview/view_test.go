package clusterview

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// A Deployment's current revision is the ReplicaSet its controller numbered last (a
// rollback renumbers the old one), whatever the list order; one in another namespace
// naming it is no revision of it; a ReplicaSet of another controller is a bare one.
func TestViewsCurrentRevision(t *testing.T) {
	rs := func(name, ns, revision string, replicas int32, owner string) *appsv1.ReplicaSet {
		r := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID(name),
			Annotations:     map[string]string{deploymentRevision: revision},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: owner, Name: "web", UID: "d-web", Controller: ptr.To(true)}}},
			Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To(replicas)}}
		return r
	}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", UID: "d-web"}}
	views := Views(Objects{Deployments: []*appsv1.Deployment{dep}, ReplicaSets: []*appsv1.ReplicaSet{
		rs("web-a", "shop", "3", 2, "Deployment"), rs("web-b", "shop", "10", 1, "Deployment"), rs("web-c", "shop", "2", 0, "Deployment"),
		rs("forged", "elsewhere", "99", 5, "Deployment"), rs("other", "shop", "1", 1, "Job"),
	}})
	byKind := map[string]WorkloadView{}
	for _, v := range views {
		byKind[v.Kind] = v
	}
	d := byKind["Deployment"]
	if d.RevisionName != "web-b" || len(d.Older) != 2 || !d.Rolling {
		t.Errorf("Deployment: revision %q, %d older, rolling %v; want web-b (revision 10), 2 older, rolling", d.RevisionName, len(d.Older), d.Rolling)
	}
	if bare := byKind["ReplicaSet"]; len(views) != 2 || bare.RevisionName != "other" {
		t.Errorf("views %v: want the Deployment and the Job's ReplicaSet as a bare one", views)
	}
	if r := RevisionsOf("Deployment", "shop", nil); r.Current != nil || r.Rolling {
		t.Errorf("no ReplicaSet: %+v, want no current revision", r)
	}
}

// A running Job is a view of its own, counted on its UID; a CronJob's Job has the
// CronJob's annotations after its own and is selected by policies as the CronJob; a
// finished Job is no view.
func TestViewsJobs(t *testing.T) {
	cj := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: "demo", UID: "cj", Labels: map[string]string{"team": "batch"}}}
	owned := []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "CronJob", Name: "nightly", UID: "cj", Controller: ptr.To(true)}}
	running := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "nightly-1", Namespace: "demo", UID: "job1", OwnerReferences: owned, Labels: map[string]string{"job": "x"}},
		Spec: batchv1.JobSpec{Parallelism: ptr.To[int32](3)}}
	done := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "nightly-0", Namespace: "demo", UID: "job0", OwnerReferences: owned},
		Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}}}
	views := Views(Objects{Jobs: []*batchv1.Job{running, done}, CronJobs: []*batchv1.CronJob{cj}})
	if len(views) != 1 {
		t.Fatalf("views %+v: want the running Job only", views)
	}
	v := views[0]
	if v.Kind != "Job" || v.Revision != "job1" || replicasOf(v.Replicas) != 3 {
		t.Errorf("view %+v: want Job counted on job1 for 3 replicas", v)
	}
	if links := v.Links(); len(links) != 3 || links[2].Name != "CronJob demo/nightly" {
		t.Errorf("links %+v: want the pod template, the Job, then its CronJob", links)
	}
	if p := v.Policy(); p.Kind != "CronJob" || p.Labels["team"] != "batch" {
		t.Errorf("policy workload %+v: want the CronJob's kind and labels", p)
	}
}
