package clusterview

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/utils/ptr"
)

// A ReplicaSet's workload carries its spec.replicas, which bounds the reservations its
// revision may hold (displaceStale); a StatefulSet's, and an unset one, read as unknown.
func TestWorkloadCarriesTheReplicaSetsReplicas(t *testing.T) {
	objects := workloadObjects(burstStrategy)
	for _, obj := range objects {
		if rs, ok := obj.(*appsv1.ReplicaSet); ok {
			rs.Spec.Replicas = ptr.To[int32](7)
		}
	}
	resolver := syncedCaches(t, objects...).Resolver
	ctx := context.Background()
	rsRef := controllerRef("ReplicaSet", "web-5c4ff85997", testRSUID)
	w, err := resolver.Resolve(ctx, testNS, &rsRef)
	if err != nil || w.Replicas != 7 {
		t.Fatalf("ReplicaSet workload: replicas %v (%v), want 7", w, err)
	}
	stsRef := controllerRef("StatefulSet", "db", testStatefulUID)
	if w, err := resolver.Resolve(ctx, testNS, &stsRef); err != nil || w.Replicas != -1 {
		t.Fatalf("StatefulSet workload: %+v (%v), want replicas -1", w, err)
	}
	unset := syncedCaches(t, workloadObjects(burstStrategy)...).Resolver
	if w, err := unset.Resolve(ctx, testNS, &rsRef); err != nil || w.Replicas != -1 {
		t.Fatalf("ReplicaSet without spec.replicas: %+v (%v), want -1", w, err)
	}
}
