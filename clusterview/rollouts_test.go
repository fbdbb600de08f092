package clusterview

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/api/v1alpha1"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/policy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

const (
	testRolloutUID   = types.UID("rollout-uid-1")
	testRolloutRSUID = types.UID("rollout-rs-uid-1")
	testRolloutRS    = "canary-7d9f8c6b5"
)

// rolloutMeta is Rollout ns/name as the metadata API serves it.
func rolloutMeta(name string, uid types.UID, labels, annotations map[string]string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: "argoproj.io/v1alpha1", Kind: "Rollout"},
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name, UID: uid, Labels: labels, Annotations: annotations},
	}
}

// rolloutReplicaSet is a ReplicaSet Rollout "canary" (uid owner) controls, as Argo
// Rollouts makes it: its own labels and annotations, none of them a strategy.
func rolloutReplicaSet(owner types.UID) *appsv1.ReplicaSet {
	yes := true
	return &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{
		Name: testRolloutRS, Namespace: testNS, UID: testRolloutRSUID,
		Labels:      map[string]string{"app": "canary", "rollouts-pod-template-hash": "7d9f8c6b5"},
		Annotations: map[string]string{"rollout.argoproj.io/revision": "1"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "argoproj.io/v1alpha1", Kind: "Rollout", Name: "canary", UID: owner,
			Controller: &yes, BlockOwnerDeletion: &yes}},
	}}
}

// rolloutCaches returns synced caches over the ReplicaSet objects and, when rollouts
// is not nil, the Rollouts watched through a fake metadata client.
func rolloutCaches(t testing.TB, rollouts []runtime.Object, objects ...runtime.Object) *Caches {
	t.Helper()
	caches, err := NewCaches(fake.NewClientset(objects...), 0)
	if err != nil {
		t.Fatal(err)
	}
	if rollouts != nil {
		scheme := runtime.NewScheme()
		metav1.AddMetaToScheme(scheme)
		meta := metadatafake.NewSimpleMetadataClient(scheme, rollouts...)
		caches.WatchRollouts(meta, meta)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	caches.Start(ctx)
	if err := caches.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	return caches
}

// A Rollout's ReplicaSet is a workload of the Rollout: Ref and Describe name it, its
// annotation comes before the ReplicaSet's, and the seats count per ReplicaSet.
func TestRolloutOwnerIsFollowed(t *testing.T) {
	ro := rolloutMeta("canary", testRolloutUID, map[string]string{"app": "canary"}, map[string]string{strategy.AnnotationStrategy: burstStrategy})
	resolver := rolloutCaches(t, []runtime.Object{ro}, rolloutReplicaSet(testRolloutUID)).Resolver
	ref := controllerRef("ReplicaSet", testRolloutRS, testRolloutRSUID)
	w, err := resolver.Resolve(context.Background(), testNS, &ref)
	if err != nil {
		t.Fatal(err)
	}
	if w.Describe() != "Rollout shop/canary" || w.Ref.APIVersion != "argoproj.io/v1alpha1" || w.Ref.UID != testRolloutUID {
		t.Errorf("workload %s, ref %+v; want Rollout shop/canary", w.Describe(), w.Ref)
	}
	if w.Revision != testRolloutRSUID {
		t.Errorf("revision %s, want the ReplicaSet's UID %s", w.Revision, testRolloutRSUID)
	}
	if src := strategy.Find(w.Chain...); src.Raw != burstStrategy || src.Object != "Rollout shop/canary" {
		t.Errorf("strategy %q from %q, want the Rollout's", src.Raw, src.Object)
	}
}

// The Rollout's annotation wins over a policy for kind Rollout; a policy for kind
// Rollout selects an un-annotated Rollout by its own labels; a policy for other kinds
// does not.
func TestRolloutAnnotationBeforePolicy(t *testing.T) {
	policyFor := func(kinds ...v1alpha1.WorkloadKind) *policy.Index {
		p := v1alpha1.PlacementPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "rollouts"},
			Spec: v1alpha1.PlacementPolicySpec{Strategy: "a=1", Kinds: kinds, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "web"}}}}
		return policy.NewIndex([]v1alpha1.PlacementPolicy{p}, nil, nil)
	}
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		policies    *policy.Index
		raw, object string
	}{
		{"annotation over policy", map[string]string{strategy.AnnotationStrategy: burstStrategy}, policyFor(v1alpha1.KindRollout), burstStrategy, "Rollout shop/canary"},
		{"policy for Rollouts", nil, policyFor(v1alpha1.KindRollout), "a=1", "PlacementPolicy shop/rollouts"},
		{"policy for every kind", nil, policyFor(), "a=1", "PlacementPolicy shop/rollouts"},
		{"policy for ReplicaSets", nil, policyFor(v1alpha1.KindReplicaSet, v1alpha1.KindDeployment), "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ro := rolloutMeta("canary", testRolloutUID, map[string]string{"team": "web"}, tc.annotations)
			resolver := rolloutCaches(t, []runtime.Object{ro}, rolloutReplicaSet(testRolloutUID)).Resolver
			resolver.Policies = tc.policies
			ref := controllerRef("ReplicaSet", testRolloutRS, testRolloutRSUID)
			w, err := resolver.Resolve(context.Background(), testNS, &ref)
			if err != nil {
				t.Fatal(err)
			}
			if src := strategy.Find(w.Chain...); src.Raw != tc.raw || src.Object != tc.object {
				t.Errorf("strategy %q from %q, want %q from %q", src.Raw, src.Object, tc.raw, tc.object)
			}
		})
	}
}

// A ReplicaSet whose Rollout is gone (or is another object of the same name) resolves
// to an OwnerError naming both; without Rollouts watched (not served) it is a bare
// ReplicaSet, as before.
func TestRolloutMissing(t *testing.T) {
	ref := controllerRef("ReplicaSet", testRolloutRS, testRolloutRSUID)
	for _, tc := range []struct {
		name     string
		rollouts []runtime.Object
		want     string
	}{
		{"gone", []runtime.Object{}, "not found"},
		{"another UID", []runtime.Object{rolloutMeta("canary", "other-uid", nil, nil)}, "has UID other-uid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resolver := rolloutCaches(t, tc.rollouts, rolloutReplicaSet(testRolloutUID)).Resolver
			_, err := resolver.Resolve(context.Background(), testNS, &ref)
			var owner *OwnerError
			if !errors.As(err, &owner) || owner.Owner != "Rollout shop/canary" || owner.ReplicaSet != "ReplicaSet shop/"+testRolloutRS {
				t.Fatalf("error %v, want an OwnerError naming the Rollout and the ReplicaSet", err)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "strategy is unknown") {
				t.Errorf("error %q lacks %q", err, tc.want)
			}
			if tc.name == "gone" && !apierrors.IsNotFound(err) {
				t.Errorf("error %v does not carry the not-found", err)
			}
		})
	}
	t.Run("not served", func(t *testing.T) {
		rs := rolloutReplicaSet(testRolloutUID)
		rs.Annotations[strategy.AnnotationStrategy] = burstStrategy
		resolver := rolloutCaches(t, nil, rs).Resolver
		w, err := resolver.Resolve(context.Background(), testNS, &ref)
		if err != nil {
			t.Fatal(err)
		}
		if w.Describe() != "ReplicaSet shop/"+testRolloutRS {
			t.Errorf("workload %s, want the bare ReplicaSet", w.Describe())
		}
	})
}

// A Rollout the cache has not seen yet is read live.
func TestRolloutReadLive(t *testing.T) {
	caches, err := NewCaches(fake.NewClientset(rolloutReplicaSet(testRolloutUID)), 0)
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	metav1.AddMetaToScheme(scheme)
	empty := metadatafake.NewSimpleMetadataClient(scheme)
	live := metadatafake.NewSimpleMetadataClient(scheme, rolloutMeta("canary", testRolloutUID, nil, map[string]string{strategy.AnnotationStrategy: burstStrategy}))
	caches.WatchRollouts(empty, live)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	caches.Start(ctx)
	if err := caches.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	ref := controllerRef("ReplicaSet", testRolloutRS, testRolloutRSUID)
	w, err := caches.Resolver.Resolve(ctx, testNS, &ref)
	if err != nil {
		t.Fatal(err)
	}
	if w.Describe() != "Rollout shop/canary" {
		t.Errorf("workload %s", w.Describe())
	}
	gets := 0
	for _, a := range live.Actions() {
		if a.GetVerb() == "get" {
			gets++
		}
	}
	if gets != 1 {
		t.Errorf("%d live gets, want 1", gets)
	}
}

// A change of a Rollout (its annotation: the strategy) is a change of each of its
// ReplicaSets, for the convergence loop.
func TestRolloutChangeIsRevisionChange(t *testing.T) {
	scheme := runtime.NewScheme()
	metav1.AddMetaToScheme(scheme)
	ro := rolloutMeta("canary", testRolloutUID, nil, nil)
	meta := metadatafake.NewSimpleMetadataClient(scheme, ro)
	caches, err := NewCaches(fake.NewClientset(rolloutReplicaSet(testRolloutUID)), 0)
	if err != nil {
		t.Fatal(err)
	}
	caches.WatchRollouts(meta, meta)
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
	for len(changed) > 0 { // the initial lists
		<-changed
	}
	edited := ro.DeepCopy()
	edited.Annotations = map[string]string{strategy.AnnotationStrategy: burstStrategy}
	rollouts := meta.Resource(RolloutResource).Namespace(testNS).(metadatafake.MetadataClient)
	if _, err := rollouts.UpdateFake(edited, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case uid := <-changed:
		if uid != testRolloutRSUID {
			t.Errorf("changed %s, want the Rollout's ReplicaSet %s", uid, testRolloutRSUID)
		}
	case <-ctx.Done():
		t.Fatal("no revision change after the Rollout changed")
	}
}
