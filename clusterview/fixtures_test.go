package clusterview

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

const (
	testNS          = "shop"
	burstStrategy   = "karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3"
	testRSUID       = types.UID("rs-uid-1")
	testDeployUID   = types.UID("deploy-uid-1")
	testStatefulUID = types.UID("sts-uid-1")
)

// workloadObjects returns a Deployment "web", its ReplicaSet and a StatefulSet "db",
// all annotated with the strategy strat; edit them before syncedCaches.
func workloadObjects(strat string) []runtime.Object {
	ann := map[string]string{strategy.AnnotationStrategy: strat}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: testNS, UID: testDeployUID, Annotations: ann}}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{
		Name: "web-5c4ff85997", Namespace: testNS, UID: testRSUID, Annotations: ann,
		OwnerReferences: []metav1.OwnerReference{controllerRef("Deployment", "web", testDeployUID)},
	}}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: testNS, UID: testStatefulUID, Annotations: ann}}
	return []runtime.Object{dep, rs, sts}
}

func controllerRef(kind, name string, uid types.UID) metav1.OwnerReference {
	yes := true
	return metav1.OwnerReference{APIVersion: "apps/v1", Kind: kind, Name: name, UID: uid, Controller: &yes}
}

// syncedCaches returns Caches over a fake clientset holding objects, started and
// synced; they stop when the test ends.
func syncedCaches(t testing.TB, objects ...runtime.Object) *Caches {
	t.Helper()
	caches, err := NewCaches(fake.NewClientset(objects...), 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	caches.Start(ctx)
	if err := caches.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	return caches
}
