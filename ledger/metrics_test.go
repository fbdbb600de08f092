package ledger

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/fakeleases"
)

// The ledger's counters follow what it did: claims answered as owner and forwarded,
// revisions taken new and after a handover, handovers.
func TestLedgerMetricsCountWhatHappened(t *testing.T) {
	client := fake.NewClientset()
	fakeleases.WithOptimisticConcurrency(client)
	ls := ledgers(t, client, ledgerNS, 2, Config{})
	a, b := ls[0], ls[1]
	for _, l := range ls {
		if err := l.RegisterMetrics(prometheus.NewRegistry(), "test"); err != nil {
			t.Fatal(err)
		}
	}
	claim(t, a, shopRS, "a1")
	claim(t, a, shopRS, "a2")
	waitForHolder(t, b, shopRS, a.identity)
	if s := claim(t, b, shopRS, "b1"); s != 3 {
		t.Fatalf("b's forwarded claim got %d, want 3", s)
	}
	a.Handover(context.Background(), false)
	if s := claim(t, b, shopRS, "b2"); s != 4 {
		t.Fatalf("b's claim after the handover got %d, want 4", s)
	}
	waitForWrites(t, b, shopRS)

	for _, c := range []struct {
		what string
		got  prometheus.Collector
		want float64
	}{
		{"a's claims answered as owner", a.metrics.claims.WithLabelValues(claimOwner), 2},
		{"a's forwarded claims", a.metrics.claims.WithLabelValues(claimForwarded), 0},
		{"b's forwarded claims", b.metrics.claims.WithLabelValues(claimForwarded), 1},
		{"b's claims answered as owner", b.metrics.claims.WithLabelValues(claimOwner), 1},
		{"failed claims", b.metrics.claims.WithLabelValues(claimFailed), 0},
		{"a took a new revision", a.metrics.ownership.WithLabelValues(ownedNew), 1},
		{"b took a handed-over revision", b.metrics.ownership.WithLabelValues(ownedReleased), 1},
		{"b took no new revision", b.metrics.ownership.WithLabelValues(ownedNew), 0},
		{"a handed over", a.metrics.handovers, 1},
	} {
		if got := testutil.ToFloat64(c.got); got != c.want {
			t.Errorf("%s: %v, want %v", c.what, got, c.want)
		}
	}
}

// Taken over after the owner's record lapsed, or after its address refused.
func TestLedgerMetricsCountTakeoverReasons(t *testing.T) {
	t.Run("lapsed", func(t *testing.T) {
		_, clock, _, other, crash := renewedOwner(t)
		crash()
		clock.Step(DefaultOwnership)
		claim(t, other, shopRS, "after")
		if got := testutil.ToFloat64(other.metrics.ownership.WithLabelValues(ownedLapsed)); got != 1 {
			t.Fatalf("takeovers after a lapse: %v, want 1", got)
		}
	})
	t.Run("owner gone", func(t *testing.T) {
		_, clock, _, other, crash := renewedOwner(t)
		crash()
		other.peers = &http.Client{Transport: connRefused{}}
		short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		if _, err := other.Claim(short, shopRS, "first-refusal"); err == nil {
			t.Fatal("taken over at the first refusal")
		}
		clock.Step(DefaultOwnership / 2)
		claim(t, other, shopRS, "after")
		if got := testutil.ToFloat64(other.metrics.ownership.WithLabelValues(ownedGone)); got != 1 {
			t.Fatalf("takeovers of a gone owner: %v, want 1", got)
		}
		if got := testutil.ToFloat64(other.metrics.claims.WithLabelValues(claimFailed)); got != 1 {
			t.Fatalf("failed claims: %v, want 1 (the first refusal)", got)
		}
	})
	// An owner that crashed after its first write (a cold start's long term, as a slow
	// API server lengthens terms too): the survivor takes over half the configured
	// duration after the refusal, as above, not half the record's term, which would pass
	// the admission deadline and admit the claims of a burst unplaced.
	t.Run("owner gone, long term", func(t *testing.T) {
		client := fake.NewClientset()
		fakeleases.WithOptimisticConcurrency(client)
		clock := clocktesting.NewFakeClock(time.Unix(1_000_000, 0))
		ls, crashes := crashableLedgers(t, client, ledgerNS, 2, Config{Clock: clock})
		owner, other := ls[0], ls[1]
		seat := claim(t, owner, shopRS, "before")
		waitForWrites(t, owner, shopRS)
		waitFor(t, "the other replica to see the record", func() bool {
			other.mu.Lock()
			defer other.mu.Unlock()
			s := other.revs[shopRS]
			return s != nil && s.record != nil
		})
		other.mu.Lock()
		term := other.recordDuration(other.revs[shopRS].record)
		other.mu.Unlock()
		if term <= DefaultOwnership {
			t.Fatalf("the first record's term is %s: the test needs one longer than %s", term, DefaultOwnership)
		}
		crashes[0]()
		other.peers = &http.Client{Transport: connRefused{}}
		short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		if _, err := other.Claim(short, shopRS, "first-refusal"); err == nil {
			t.Fatal("taken over at the first refusal")
		}
		// The pod of the dead owner's answer shows meanwhile.
		other.PodVisible(placed("before-pod", shopRS, seat, "before"))
		clock.Step(DefaultOwnership / 2)
		bounded, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		next, err := other.Claim(bounded, shopRS, "after")
		if err != nil {
			t.Fatalf("half the configured duration after the refusal: %v", err)
		}
		if next != seat+1 {
			t.Errorf("the survivor's first seat is %d, want %d (the dead owner gave %d)", next, seat+1, seat)
		}
	})
}

// A reservation whose pod never shows up (rejected after the webhook, abandoned, forged)
// is counted when it expires; one whose pod was seen, or that was released, is not.
func TestLedgerCountsUnfulfilledReservations(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Unix(1_000_000, 0))
	l := ledgers(t, fake.NewClientset(), ledgerNS, 1, Config{Clock: clock})[0]
	ctx := context.Background()
	seen := claim(t, l, shopRS, "seen")
	l.PodVisible(placed("seen-pod", shopRS, seen, "seen"))
	claim(t, l, shopRS, "released")
	l.Release(ctx, shopRS, "released")
	claim(t, l, shopRS, "never")
	claim(t, l, shopRS, "never-either")
	clock.Step(2 * time.Minute) // past the TTL (1m in these tests)
	if s := claim(t, l, shopRS, "later"); s != 2 {
		t.Fatalf("after the unfulfilled reservations expired the next claim got %d, want 2", s)
	}
	if got := testutil.ToFloat64(l.metrics.unfulfilled); got != 2 {
		t.Errorf("seat_reservations_expired_unfulfilled_total = %v, want 2", got)
	}
}
