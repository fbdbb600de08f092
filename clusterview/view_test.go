package clusterview

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
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
