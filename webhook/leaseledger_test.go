package webhook

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

const ledgerNS = "custom-kube-scheduler-webhook"

// replicas starts n LeaseLedgers on one API (n webhook replicas) sharing held.
func replicas(t testing.TB, client kubernetes.Interface, held HeldSeats, n int) []*LeaseLedger {
	return replicasIn(t, client, ledgerNS, held, n)
}

func replicasIn(t testing.TB, client kubernetes.Interface, ns string, held HeldSeats, n int) []*LeaseLedger {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	out := make([]*LeaseLedger, n)
	for i := range out {
		l, err := NewLeaseLedger(client, ns, held, time.Minute, quietLog())
		if err != nil {
			t.Fatal(err)
		}
		l.Start(ctx)
		if !cache.WaitForCacheSync(ctx.Done(), l.HasSynced) {
			t.Fatal("lease informer did not sync")
		}
		out[i] = l
	}
	return out
}

// burst claims n seats of revision concurrently, spread round-robin over the ledgers,
// and checks they are exactly 1..n.
func burst(t testing.TB, ledgers []*LeaseLedger, revision types.UID, n int) {
	t.Helper()
	seats := make([]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			seats[i], errs[i] = ledgers[i%len(ledgers)].Claim(context.Background(), revision, types.UID(fmt.Sprintf("admission-%d", i)))
		})
	}
	wg.Wait()
	seen := map[int]bool{}
	for i, s := range seats {
		if errs[i] != nil {
			t.Fatalf("claim %d: %v", i, errs[i])
		}
		if s < 1 || s > n || seen[s] {
			t.Fatalf("seat %d handed out twice or out of 1..%d", s, n)
		}
		seen[s] = true
	}
}

func TestLeaseLedgerAcrossReplicasIsExact(t *testing.T) {
	client := fake.NewClientset()
	held := &heldMap{seats: map[types.UID]map[int]bool{}}
	burst(t, replicas(t, client, held, 3), "rs-a", 200)
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestLeaseLedgerLifecycle(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	held := &heldMap{seats: map[types.UID]map[int]bool{}}
	ls := replicas(t, client, held, 2)
	a, b := ls[0], ls[1]

	s1, err := a.Claim(ctx, "rs", "adm-1")
	if err != nil || s1 != 1 {
		t.Fatalf("first claim: %d %v", s1, err)
	}
	waitFor(t, "replica b to see the lease", func() bool { _, ok := b.heldBy("rs", "adm-1"); return ok })
	if s, _ := b.Claim(ctx, "rs", "adm-1"); s != 1 {
		t.Fatalf("a retried admission on another replica got seat %d, want 1", s)
	}
	if s, _ := b.Claim(ctx, "rs", "adm-2"); s != 2 {
		t.Fatalf("second admission got %d, want 2", s)
	}

	// The pod of seat 1 shows up: its lease goes; then the pod goes: seat 1 is free.
	held.set("rs", 1)
	a.SeatVisible(ctx, "rs", 1)
	waitFor(t, "the fulfilled lease to be deleted", func() bool {
		_, err := client.CoordinationV1().Leases(ledgerNS).Get(ctx, leaseName("rs", 1), metav1.GetOptions{})
		return err != nil
	})
	held.set("rs")
	waitFor(t, "replica b to drop the lease", func() bool { s, _ := b.Peek(ctx, "rs"); return s == 1 })
	if s, _ := b.Claim(ctx, "rs", "adm-3"); s != 1 {
		t.Fatalf("the replacement got seat %d, want 1 (where the lost pod was)", s)
	}

	// Release gives a seat back.
	b.Release(ctx, "rs", "adm-3")
	waitFor(t, "the released seat to be free", func() bool { s, _ := a.Peek(ctx, "rs"); return s == 1 })

	// A lease that expired with no pod to show is taken over.
	old := metav1.NewMicroTime(time.Now().Add(-time.Hour))
	expired := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: leaseName("rs2", 1), Namespace: ledgerNS, Labels: map[string]string{"custom-kube-scheduler-webhook.io/managed": "true", labelRevision: "rs2", labelSeat: "1"}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("gone"), LeaseDurationSeconds: ptr.To[int32](30), RenewTime: &old},
	}
	if _, err := client.CoordinationV1().Leases(ledgerNS).Create(ctx, expired, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if s, err := a.Claim(ctx, "rs2", "adm-4"); err != nil || s != 1 {
		t.Fatalf("expired lease not taken over: %d %v", s, err)
	}
}
