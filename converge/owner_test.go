package converge

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/ownership"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/unavailability"
)

// With an owner, unavailability records and the leader Lease carry its reference, so the
// garbage collector deletes them with the webhook's Deployment (helm uninstall).
func TestRecordsAndLeaderLeaseCarryTheOwner(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	owner := ownership.Deployment("cksw", "deployment-uid")
	r := unavailability.NewRecords(client, "cksw")
	r.SetOwner(owner)
	if _, err := r.Strike(ctx, "rev-1", "ns/web", 0, "test", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := adoptLeaderLease(ctx, client, "cksw", owner); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{unavailability.RecordName("rev-1"), leaderLease} {
		l, err := client.CoordinationV1().Leases("cksw").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if refs := l.OwnerReferences; len(refs) != 1 || refs[0].Name != "cksw" || refs[0].UID != "deployment-uid" {
			t.Errorf("Lease %s: owner references %v, want the Deployment cksw", name, refs)
		}
	}
	// An existing leader Lease (an earlier version's) is adopted once, and kept so.
	if err := adoptLeaderLease(ctx, client, "cksw", ownership.Deployment("cksw", "deployment-uid")); err != nil {
		t.Fatal(err)
	}
	if l, _ := client.CoordinationV1().Leases("cksw").Get(ctx, leaderLease, metav1.GetOptions{}); len(l.OwnerReferences) != 1 {
		t.Errorf("leader Lease adopted twice: %v", l.OwnerReferences)
	}
}
