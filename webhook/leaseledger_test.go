package webhook

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
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

	// The pod of seat 1 shows up: its lease records it (and stays).
	pod1 := seatedPod("p1", "rs", 1)
	if _, err := client.CoreV1().Pods(pod1.Namespace).Create(ctx, pod1, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	held.set("rs", 1)
	a.PodVisible(ctx, pod1)
	waitFor(t, "the lease to record its pod", func() bool {
		lease, err := client.CoordinationV1().Leases(ledgerNS).Get(ctx, leaseName("rs", 1), metav1.GetOptions{})
		return err == nil && lease.Annotations[annPodUID] == "p1"
	})

	// A replica whose pod cache has not seen p1 yet (the race of two watch streams)
	// must not take seat 1 while p1 exists: it checks the pod and takes seat 3.
	lagging := replicasIn(t, client, ledgerNS, &heldMap{seats: map[types.UID]map[int]bool{}}, 1)[0]
	waitFor(t, "the lagging replica to see the fulfilled lease", func() bool {
		return unseenLeases(lagging, "rs") == 1
	})
	if s, err := lagging.Claim(ctx, "rs", "adm-lag"); err != nil || s != 3 {
		t.Fatalf("a replica not seeing p1 got seat %d (%v), want 3", s, err)
	}
	lagging.Release(ctx, "rs", "adm-lag")

	// p1 goes: its lease goes, and seat 1 is free for the replacement.
	if err := client.CoreV1().Pods(pod1.Namespace).Delete(ctx, pod1.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	held.set("rs")
	a.PodGone(ctx, pod1)
	waitFor(t, "replica b to see seat 1 free", func() bool { s, _ := b.Peek(ctx, "rs"); return s == 1 })
	if s, _ := b.Claim(ctx, "rs", "adm-3"); s != 1 {
		t.Fatalf("the replacement got seat %d, want 1 (where the lost pod was)", s)
	}
	// A late "gone" event for p1 must not delete the replacement's lease.
	a.PodGone(ctx, pod1)
	time.Sleep(200 * time.Millisecond)
	if _, err := client.CoordinationV1().Leases(ledgerNS).Get(ctx, leaseName("rs", 1), metav1.GetOptions{}); err != nil {
		t.Fatalf("the replacement's lease was deleted: %v", err)
	}

	// A fulfilled lease whose pod is gone though no replica saw it go (all were down):
	// the next claim checks the pod, deletes the lease and takes the seat.
	pod2 := seatedPod("p2", "rs", 2)
	lease2, err := client.CoordinationV1().Leases(ledgerNS).Get(ctx, leaseName("rs", 2), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lease2.Annotations = map[string]string{annPodUID: string(pod2.UID), annPodName: pod2.Name, annPodNamespace: pod2.Namespace}
	if _, err := client.CoordinationV1().Leases(ledgerNS).Update(ctx, lease2, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "replica a to see lease 2 fulfilled", func() bool { return unseenLeases(a, "rs") == 1 })
	if s, err := a.Claim(ctx, "rs", "adm-4"); err != nil || s != 2 {
		t.Fatalf("seat of a vanished pod: got %d (%v), want 2", s, err)
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
	if s, err := a.Claim(ctx, "rs2", "adm-5"); err != nil || s != 1 {
		t.Fatalf("expired lease not taken over: %d %v", s, err)
	}
}

// seatedPod is a placed pod of revision holding seat.
func seatedPod(name string, revision types.UID, seat int) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: name, Namespace: "shop", UID: types.UID(name),
		Annotations:     map[string]string{"custom-kube-scheduler-webhook.io/seat": fmt.Sprint(seat)},
		OwnerReferences: []metav1.OwnerReference{controllerRef("ReplicaSet", "web", revision)},
	}}
}

// unseenLeases counts the fulfilled Leases of revision whose pod l cannot see.
func unseenLeases(l *LeaseLedger, revision types.UID) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, unseen := l.takenLocked(revision)
	return len(unseen)
}
