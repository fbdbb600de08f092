package ledger

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/fakeleases"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// An owner whose claims stopped releases its record once its ownership ends, listing
// every seat it answered: the next claim on another replica takes the revision at once
// (no lapse to wait for) knowing those seats.
func TestIdleOwnerReleasesItsRecord(t *testing.T) {
	client := fake.NewClientset()
	fakeleases.WithOptimisticConcurrency(client)
	clock := clocktesting.NewFakeClock(time.Unix(1_000_000, 0))
	ls := ledgers(t, client, ledgerNS, 2, Options{Clock: clock})
	owner, other := ls[0], ls[1]
	claim(t, owner, shopRS, "a")
	claim(t, owner, shopRS, "b")
	waitForWrites(t, owner, shopRS)
	// Idle once its ownership has run out (a cold start's first term is longer).
	owner.mu.Lock()
	term := owner.state(shopRS).term
	owner.mu.Unlock()
	clock.Step(term / 2)
	owner.releaseIdle(context.Background())
	waitForHolder(t, other, shopRS, "")
	rec := seenRecord(t, other, shopRS)
	if len(decodeReservations(rec.Annotations[strategy.AnnotationReservations])) != 2 {
		t.Fatalf("released record: reservations %q, want 2", rec.Annotations[strategy.AnnotationReservations])
	}
	other.peers = &http.Client{Transport: refusing{}} // no forwarding: it must own
	if s := claim(t, other, shopRS, "c"); s != 3 {
		t.Fatalf("after the release got %d, want 3", s)
	}
}

// A burst is answered from memory: a few record writes per burst, not one per claim (at
// most 1 per 100 claims, with the takeover).
func TestBurstWritesFewRecords(t *testing.T) {
	client := fake.NewClientset()
	writes := fakeleases.WithOptimisticConcurrency(client)
	l := ledgers(t, client, ledgerNS, 1, Options{})[0]
	const n = 2000
	var wg sync.WaitGroup
	seats := make(chan int, n)
	for i := range n {
		wg.Go(func() {
			seats <- claim(t, l, shopRS, types.UID(fmt.Sprint("burst-", i)))
		})
	}
	wg.Wait()
	close(seats)
	seen := map[int]bool{}
	for s := range seats {
		if seen[s] || s < 1 || s > n {
			t.Fatalf("seat %d twice or out of 1..%d", s, n)
		}
		seen[s] = true
	}
	if got := writes.OK.Load(); got > n/100 {
		t.Fatalf("%d record writes for a burst of %d claims, want at most %d", got, n, n/100)
	}
	t.Logf("%d record writes for %d claims", writes.OK.Load(), n)
}

// seenRecord is the record of rev that replica l sees (the test fails when none).
func seenRecord(t testing.TB, l *Ledger, rev clusterview.Revision) *coordinationv1.Lease {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.revs[rev]
	if s == nil || s.record == nil {
		t.Fatalf("%s sees no record of %s", l.identity, rev.UID)
	}
	return s.record.DeepCopy()
}

// Forged AdmissionReviews naming a real ReplicaSet: reservations whose pods never come.
// They can hold no seat a real pod of the ReplicaSet claims once they are a second old,
// and a flood of them never leaves a real pod unplaced.
func TestForgedReviewsCannotHoldTheBaseSeats(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Unix(1_000_000, 0))
	l := ledgers(t, fake.NewClientset(), ledgerNS, 1, Options{Clock: clock})[0]
	ctx := context.Background()
	claimFor := func(id types.UID, replicas int) int {
		t.Helper()
		seat, err := l.Claim(ctx, shopRS, id, replicas)
		if err != nil {
			t.Fatalf("claim %s: %v", id, err)
		}
		return seat
	}
	// A ReplicaSet of one pod, not created yet; a forger holds seats 1 and 2.
	claimFor("forged-1", 1)
	claimFor("forged-2", 1)
	clock.Step(staleReservation)
	if s := claimFor("real-1", 1); s != 1 {
		t.Fatalf("the real pod got seat %d, want 1: the forged reservations hold the base seats", s)
	}
	l.PodVisible(placed("real-1", shopRS, 1, "real-1"))
	// A flood: more forged reviews than the record holds, within one second.
	for i := range maxReservations + 100 {
		claimFor(types.UID(fmt.Sprint("flood-", i)), 1)
	}
	clock.Step(staleReservation)
	// Scaled to 2: the new pod gets seat 2, not one above the flood.
	if s := claimFor("real-2", 2); s != 2 {
		t.Fatalf("after a flood the real pod got seat %d, want 2", s)
	}
	if got := testutil.ToFloat64(l.metrics.displaced); got < maxReservations {
		t.Fatalf("displaced reservations: %v, want at least %d", got, maxReservations)
	}
}

// A pod rejected after this webhook (a namespace's pod quota) never appears, and its
// ReplicaSet creates it again under a new admission UID: the retry gets the first
// attempt's seat back, not the next one.
func TestRetryOfARejectedPodGetsItsSeatBack(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Unix(1_000_000, 0))
	l := ledgers(t, fake.NewClientset(), ledgerNS, 1, Options{Clock: clock})[0]
	for i := 1; i <= 2; i++ {
		l.PodVisible(placed(fmt.Sprint("p", i), shopRS, i, ""))
	}
	ctx := context.Background()
	first, err := l.Claim(ctx, shopRS, "attempt-1", 3)
	if err != nil || first != 3 {
		t.Fatalf("first attempt: seat %d, %v; want 3", first, err)
	}
	clock.Step(2 * staleReservation) // the ReplicaSet controller's backoff
	if s, err := l.Claim(ctx, shopRS, "attempt-2", 3); err != nil || s != first {
		t.Fatalf("the retry got seat %d (%v), want the first attempt's %d", s, err, first)
	}
	// Within the second, the first attempt's pod may still be on its way: it keeps it.
	if s, err := l.Claim(ctx, shopRS, "attempt-3", 3); err != nil || s != first+1 {
		t.Fatalf("a retry within a second got seat %d (%v), want %d", s, err, first+1)
	}
}
