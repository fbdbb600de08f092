package clusterview

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	discoveryfake "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/policy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// Argo Rollouts installed after the caches started: discovery does not serve Rollouts,
// then does; from then on a ReplicaSet's Rollout is followed (its strategy, its
// changes queued for the convergence loop), without a restart.
func TestRolloutsServedAfterStart(t *testing.T) {
	caches, err := NewCaches(fake.NewClientset(rolloutReplicaSet(testRolloutUID)), 0)
	if err != nil {
		t.Fatal(err)
	}
	changed := make(chan types.UID, 100)
	if _, err := caches.OnRevisionChange(func(uid types.UID) { changed <- uid }); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	caches.Start(ctx)
	if err := caches.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}

	// Discovery says "not found" for argoproj.io/v1alpha1 until installed is set.
	var installed atomic.Bool
	disc := &discoveryfake.FakeDiscovery{Fake: &clienttesting.Fake{}}
	disc.Resources = []*metav1.APIResourceList{{GroupVersion: policy.RolloutResource.GroupVersion().String(),
		APIResources: []metav1.APIResource{{Name: "rollouts", Namespaced: true, Kind: "Rollout"}}}}
	looks := atomic.Int32{}
	disc.PrependReactor("get", "resource", func(clienttesting.Action) (bool, runtime.Object, error) {
		looks.Add(1)
		if !installed.Load() {
			return true, nil, apierrors.NewNotFound(policy.RolloutResource.GroupResource(), "")
		}
		return false, nil, nil
	})
	scheme := runtime.NewScheme()
	metav1.AddMetaToScheme(scheme)
	meta := metadatafake.NewSimpleMetadataClient(scheme,
		rolloutMeta("canary", testRolloutUID, nil, map[string]string{strategy.AnnotationStrategy: burstStrategy}))
	found := make(chan struct{})
	go func() {
		defer close(found)
		caches.WatchRolloutsWhenServed(ctx, func() (bool, error) { return policy.RolloutsServed(disc) }, 10*time.Millisecond, meta, meta, discardLog())
	}()

	ref := controllerRef("ReplicaSet", testRolloutRS, testRolloutRSUID)
	for looks.Load() < 3 { // not served: looked at, and still a bare ReplicaSet
		time.Sleep(5 * time.Millisecond)
	}
	if caches.Resolver.FollowsRollouts() || caches.Rollouts() != nil {
		t.Fatal("Rollouts followed before discovery serves them")
	}
	w, err := caches.Resolver.Resolve(ctx, testNS, &ref)
	if err != nil || w.Describe() != "ReplicaSet shop/"+testRolloutRS {
		t.Fatalf("before Argo Rollouts is installed: workload %v, %v; want the bare ReplicaSet", w, err)
	}
	for len(changed) > 0 { // the initial lists
		<-changed
	}

	installed.Store(true)
	select {
	case <-found:
	case <-ctx.Done():
		t.Fatal("Rollouts never followed after discovery served them")
	}
	w, err = caches.Resolver.Resolve(ctx, testNS, &ref)
	if err != nil || w.Describe() != "Rollout shop/canary" {
		t.Fatalf("after Argo Rollouts is installed: workload %v, %v; want Rollout shop/canary", w, err)
	}
	if src := strategy.Find(w.Chain...); src.Raw != burstStrategy {
		t.Errorf("strategy %q, want the Rollout's", src.Raw)
	}
	// The late informer has the convergence loop's handler: its initial list queues
	// the Rollout's ReplicaSet.
	select {
	case uid := <-changed:
		if uid != testRolloutRSUID {
			t.Errorf("changed %s, want the Rollout's ReplicaSet %s", uid, testRolloutRSUID)
		}
	case <-ctx.Done():
		t.Fatal("no revision change from the Rollout informer started late")
	}
	if err := caches.WaitForSync(ctx); err != nil || len(caches.Rollouts()) != 1 {
		t.Errorf("late Rollout informer: %d Rollouts cached, %v", len(caches.Rollouts()), err)
	}
	n := looks.Load()
	time.Sleep(50 * time.Millisecond)
	if looks.Load() != n {
		t.Error("discovery still asked after Rollouts were found")
	}
}

func discardLog() logrus.FieldLogger {
	l, _ := logtest.NewNullLogger()
	return l
}
