package policy

import (
	"context"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	dynfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/api/v1alpha1"
)

// TestStatusWriterWritesARecreatedPolicy: a policy deleted and created again under the
// same name, with the same spec, is a new object (a new UID) without a status. Its
// computed status equals the one written for the old object, so a writer that
// remembered what it wrote by name would skip it and leave it without conditions
// forever.
func TestStatusWriterWritesARecreatedPolicy(t *testing.T) {
	ns := namespace("shop", nil, "")
	client := fake.NewClientset(&ns)
	first := pp("shop", "web", "p=1", 0, map[string]string{"app": "web"})
	first.UID, first.Generation = "uid-first", 1
	dyn := policyDynamic(toUnstructured(t, &first, v1alpha1.KindPlacementPolicy))
	c, err := NewCache(client, dyn, 0, logrus.New())
	if err != nil {
		t.Fatal(err)
	}
	ctx := runCache(t, c)
	w := &StatusWriter{Cache: c, Dyn: dyn, Log: logrus.New(), Workloads: func() []Governable { return nil }}
	written, prev := map[policyKey]string{}, map[policyKey][]metav1.Condition{}
	w.round(ctx, written, prev)
	if n := statusPatches(dyn, "web"); n != 1 {
		t.Fatalf("status patches of the first policy: %d, want 1", n)
	}

	pols := dyn.Resource(v1alpha1.PlacementPolicies).Namespace("shop")
	if err := pols.Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	again := pp("shop", "web", "p=1", 0, map[string]string{"app": "web"})
	again.UID, again.Generation = "uid-again", 1
	if _, err := pols.Create(ctx, toUnstructured(t, &again, v1alpha1.KindPlacementPolicy), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Wait (no deadline asserted: generous) until the cache shows the new object.
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return cachedUID(c, "shop", "web") == "uid-again", nil
	})
	if err != nil {
		t.Fatalf("the cache never showed the re-created policy: %v", err)
	}
	w.round(ctx, written, prev)
	if n := statusPatches(dyn, "web"); n != 2 {
		t.Fatalf("status patches after the policy was re-created: %d, want 2 (the new object has no status)", n)
	}
	// And nothing more while nothing changes.
	w.round(ctx, written, prev)
	if n := statusPatches(dyn, "web"); n != 2 {
		t.Errorf("status patches with nothing changed: %d, want 2", n)
	}
	if len(written) != 1 || len(prev) != 1 {
		t.Errorf("the writer still remembers the deleted policy: %d sums, %d condition sets", len(written), len(prev))
	}
}

// statusPatches counts the patches of the status of PlacementPolicy name.
func statusPatches(dyn *dynfake.FakeDynamicClient, name string) int {
	n := 0
	for _, a := range dyn.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok && p.GetVerb() == "patch" && p.GetSubresource() == "status" && p.GetName() == name {
			n++
		}
	}
	return n
}

// cachedUID is the UID of the policy the cache holds under namespace/name.
func cachedUID(c *Cache, namespace, name string) types.UID {
	for _, obj := range c.namespaced.GetStore().List() {
		if p, ok := obj.(*cachedPolicy); ok && p.meta.Namespace == namespace && p.meta.Name == name {
			return p.meta.UID
		}
	}
	return ""
}

// TestStatusWriterRoundSoonAfterAChange: with rounds an hour apart, a policy created
// after the first round gets its status once a change wakes the writer.
func TestStatusWriterRoundSoonAfterAChange(t *testing.T) {
	ns := namespace("shop", nil, "")
	client := fake.NewClientset(&ns)
	first := pp("shop", "web", "p=1", 0, map[string]string{"app": "web"})
	dyn := policyDynamic(toUnstructured(t, &first, v1alpha1.KindPlacementPolicy))
	c, err := NewCache(client, dyn, 0, logrus.New())
	if err != nil {
		t.Fatal(err)
	}
	ctx := runCache(t, c)
	changes := make(chan struct{}, 1)
	w := &StatusWriter{Cache: c, Dyn: dyn, Log: logrus.New(), Workloads: func() []Governable { return nil }, Every: time.Hour, Changes: changes}
	go w.Run(ctx)
	patched := func(name string) error {
		return wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return statusPatches(dyn, name) > 0, nil
		})
	}
	if err := patched("web"); err != nil {
		t.Fatalf("the first round wrote no status: %v", err)
	}
	api := pp("shop", "api", "p=1", 0, map[string]string{"app": "api"})
	api.UID = "uid-api"
	if _, err := dyn.Resource(v1alpha1.PlacementPolicies).Namespace("shop").Create(ctx, toUnstructured(t, &api, v1alpha1.KindPlacementPolicy), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return len(c.view.Load().namespaced["shop"]) == 2, nil
	}); err != nil {
		t.Fatalf("the cache's view never showed the new policy: %v", err)
	}
	changes <- struct{}{}
	if err := patched("api"); err != nil {
		t.Fatalf("a change did not wake a round within a minute (rounds an hour apart): %v", err)
	}
}
