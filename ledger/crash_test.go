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
	ls := ledgers(t, client, ledgerNS, 2, Config{Clock: clock})
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
	l := ledgers(t, client, ledgerNS, 1, Config{})[0]
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
