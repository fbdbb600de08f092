package clusterview

import (
	"context"
	"reflect"
	"testing"

	"k8s.io/client-go/kubernetes/fake"
)

// Before the informers have listed, Unsynced names each of them; after, none.
func TestCachesUnsyncedNamesEachInformer(t *testing.T) {
	caches, err := NewCaches(fake.NewClientset(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := caches.Unsynced(), []string{"pods", "replicasets", "deployments", "statefulsets", "jobs", "cronjobs"}; !reflect.DeepEqual(got, want) {
		t.Errorf("before Start: %v, want %v", got, want)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	caches.Start(ctx)
	if err := caches.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := caches.Unsynced(); len(got) != 0 {
		t.Errorf("after the sync: %v, want none", got)
	}
}
