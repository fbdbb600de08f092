package ledger

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/fakeleases"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// witnessedOwner starts two ledgers on clock (nil: the real one): the first owns
// shopRS, the second forwarded a claim to it and is named its witness by a record the
// second has seen.
func witnessedOwner(t *testing.T, clock *clocktesting.FakeClock) (owner, witness *Ledger, crash func()) {
	t.Helper()
	client := fake.NewClientset()
	fakeleases.WithOptimisticConcurrency(client)
	opts := Options{WitnessTimeout: time.Minute}
	if clock != nil {
		opts.Clock = clock
	}
	// Acknowledgements wait for as long as a loaded machine needs: these tests are
	// about what a witness knows, not about giving one up.
	ls, crashes := crashableLedgers(t, client, ledgerNS, 2, opts)
	owner, witness = ls[0], ls[1]
	if s := claim(t, owner, shopRS, "first"); s != 1 {
		t.Fatalf("first claim got %d", s)
	}
	seesRecord(t, witness, "held by the owner", func(r *coordinationv1.Lease) bool { return holderOf(r) == owner.identity })
	if s := claim(t, witness, shopRS, "forwarded"); s != 2 {
		t.Fatalf("forwarded claim got %d", s)
	}
	// The next answer makes the forwarding replica the witness and names it.
	if s := claim(t, owner, shopRS, "adopting"); s != 3 {
		t.Fatalf("claim adopting the witness got %d", s)
	}
	seesRecord(t, witness, "naming it the witness", func(r *coordinationv1.Lease) bool {
		return r.Annotations[strategy.AnnotationSeatWitness] == witness.identity
	})
	return owner, witness, crashes[0]
}

// seesRecord waits until replica l knows a record of shopRS that cond holds for,
// reading it from the API server too: the fake client's watch may miss an object
// created while it starts.
func seesRecord(t *testing.T, l *Ledger, what string, cond func(*coordinationv1.Lease) bool) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%s to see a record %s", l.identity, what), func() bool {
		if err := l.refresh(context.Background(), shopRS); err != nil {
			t.Logf("read the record: %v", err)
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		s := l.revs[shopRS]
		return s != nil && s.record != nil && cond(s.record)
	})
}

// The owner answers seats its record does not list and dies before their pods show:
// its witness takes the revision over at the first refusal, with no wait (the fake
// clock never moves), and hands out none of them again: the next claim gets the lowest
// seat nobody was given, not the top of the dead owner's mark.
func TestWitnessTakesOverAtOnce(t *testing.T) {
	owner, witness, crash := witnessedOwner(t, clocktesting.NewFakeClock(time.Unix(1_000_000, 0)))
	answered := map[int]bool{1: true, 2: true, 3: true}
	for i := range 4 {
		answered[claim(t, owner, shopRS, types.UID(fmt.Sprint("unseen-", i)))] = true
	}
	if len(answered) != 7 {
		t.Fatalf("the owner answered %v, want 7 distinct seats", answered)
	}
	crash()
	witness.peers = &http.Client{Transport: connRefused{}}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	seat, err := witness.Claim(ctx, shopRS, "after", -1)
	if err != nil {
		t.Fatalf("the witness did not take over without waiting: %v", err)
	}
	if answered[seat] || seat != 8 {
		t.Fatalf("the witness handed out %d after the owner answered %v, want 8", seat, answered)
	}
	if got := testutil.ToFloat64(witness.metrics.witness.WithLabelValues(witnessTakeover)); got != 1 {
		t.Fatalf("witnessed takeovers: %v, want 1", got)
	}
	// A pod of the dead owner's answers shows up: the seat stays its.
	witness.PodVisible(placed("late", shopRS, 7, "unseen-3"))
	if s := claim(t, witness, shopRS, "next"); answered[s] || s != 9 {
		t.Fatalf("next claim got %d, want 9", s)
	}
}

// A witness that stops acknowledging is given up: the claim waiting for it is answered
// once a record naming no witness has landed, and a replica taking over from that
// record falls back on the seat mark.
func TestUnreachableWitnessIsGivenUp(t *testing.T) {
	owner, witness, _ := witnessedOwner(t, clocktesting.NewFakeClock(time.Unix(1_000_000, 0)))
	owner.peers = &http.Client{Transport: connRefused{}}
	if s := claim(t, owner, shopRS, "unacknowledged"); s != 4 {
		t.Fatalf("claim with an unreachable witness got %d, want 4", s)
	}
	owner.mu.Lock()
	s := owner.revs[shopRS]
	named, recorded := s.record.Annotations[strategy.AnnotationSeatWitness], s.witnessing.recorded
	owner.mu.Unlock()
	if named != "" || recorded != "" {
		t.Fatalf("after giving the witness up the record names %q (recorded %q), want none", named, recorded)
	}
	if got := testutil.ToFloat64(owner.metrics.witness.WithLabelValues(witnessGivenUp)); got != 1 {
		t.Fatalf("witnesses given up: %v, want 1", got)
	}
	seesRecord(t, witness, "naming no witness", func(r *coordinationv1.Lease) bool {
		return r.Annotations[strategy.AnnotationSeatWitness] == ""
	})
	witness.mu.Lock()
	fast := witness.witnessedBy(witness.revs[shopRS], owner.identity)
	witness.mu.Unlock()
	if fast {
		t.Fatal("a witness given up would still take over at once")
	}
}

// A replica taking the revision over acknowledges no more answers of the old owner:
// what it holds is what it had when the takeover began.
func TestWitnessRefusesAnswersOnceItOwns(t *testing.T) {
	owner, witness, crash := witnessedOwner(t, clocktesting.NewFakeClock(time.Unix(1_000_000, 0)))
	crash()
	witness.peers = &http.Client{Transport: connRefused{}}
	claim(t, witness, shopRS, "taking-over")
	if err := witness.acknowledge(shopRS, owner.identity, "9:abc"); err == nil {
		t.Fatal("the new owner acknowledged an answer of the old one")
	}
}

// A burst through two replicas whose owner dies part-way: the witness takes over as
// the witness, and no seat is given twice. The dead owner's claims in flight may fail
// (a killed process answers nothing); every claim the witness takes gets a seat, and
// all seats are within 1..n. (The real clock: claims meeting the dead owner's failed
// writes retry on it.)
func TestWitnessedBurstThroughACrash(t *testing.T) {
	owner, witness, crash := witnessedOwner(t, nil)
	toOwner := &switchable{next: witness.peers.Transport}
	witness.peers = &http.Client{Transport: toOwner}
	const n = 400
	seats := make([]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 3; i < n; i++ {
		l := []*Ledger{owner, witness}[i%2]
		if i == n/2 {
			crash()
			toOwner.refuse.Store(true)
		}
		if i >= n/2 {
			l = witness
		}
		wg.Go(func() {
			seats[i], errs[i] = l.Claim(ctx, shopRS, types.UID(fmt.Sprint("burst-", i)), -1)
		})
	}
	wg.Wait()
	seen := map[int]bool{1: true, 2: true, 3: true}
	for i := 3; i < n; i++ {
		if errs[i] != nil {
			if i >= n/2 || i%2 == 1 {
				t.Errorf("claim %d through the witness: %v", i, errs[i])
			}
			continue
		}
		if s := seats[i]; seen[s] || s < 1 || s > n {
			t.Fatalf("claim %d got seat %d: twice or out of 1..%d", i, s, n)
		}
		seen[seats[i]] = true
	}
	if got := testutil.ToFloat64(witness.metrics.witness.WithLabelValues(witnessTakeover)); got != 1 {
		witness.mu.Lock()
		st := witness.revs[shopRS]
		t.Logf("the witness sees a record naming witness %q holder %q, witnessed owner %q (owner %s), given up %v acked %v", st.record.Annotations[strategy.AnnotationSeatWitness], holderOf(st.record), st.witnessed.owner, owner.identity,
			testutil.ToFloat64(owner.metrics.witness.WithLabelValues(witnessGivenUp)), testutil.ToFloat64(owner.metrics.witness.WithLabelValues(witnessAcknowledged)))
		witness.mu.Unlock()
		t.Fatalf("witnessed takeovers: %v, want 1", got)
	}
}

// A third replica that finds the owner gone sends its claim to the witness the record
// names, which takes the revision over at once (the fake clock never moves): the
// third replica need not wait until it sees the witness's record.
func TestThirdReplicaAsksTheWitness(t *testing.T) {
	client := fake.NewClientset()
	fakeleases.WithOptimisticConcurrency(client)
	clock := clocktesting.NewFakeClock(time.Unix(1_000_000, 0))
	ls, crashes := crashableLedgers(t, client, ledgerNS, 3, Options{Clock: clock, WitnessTimeout: time.Minute})
	owner, witness, third := ls[0], ls[1], ls[2]
	claim(t, owner, shopRS, "first")
	seesRecord(t, witness, "held by the owner", func(r *coordinationv1.Lease) bool { return holderOf(r) == owner.identity })
	claim(t, witness, shopRS, "forwarded")
	claim(t, owner, shopRS, "adopting")
	for _, l := range []*Ledger{witness, third} {
		seesRecord(t, l, "naming the witness", func(r *coordinationv1.Lease) bool {
			return r.Annotations[strategy.AnnotationSeatWitness] == witness.identity
		})
	}
	crashes[0]()
	third.peers = &http.Client{Transport: refuseTo{host: strings.TrimPrefix(owner.peerURL, "http://"), next: third.peers.Transport}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	seat, err := third.Claim(ctx, shopRS, "third", -1)
	if err != nil || seat != 4 {
		t.Fatalf("the third replica's claim: seat %d, %v; want 4 from the witness at once", seat, err)
	}
	if got := testutil.ToFloat64(witness.metrics.witness.WithLabelValues(witnessTakeover)); got != 1 {
		t.Fatalf("witnessed takeovers: %v, want 1", got)
	}
}

// refuseTo refuses the requests to host, as a closed port does, and passes the others.
type refuseTo struct {
	host string
	next http.RoundTripper
}

func (r refuseTo) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Host == r.host {
		return connRefused{}.RoundTrip(req)
	}
	return r.next.RoundTrip(req)
}

// switchable refuses every request, as a closed port does, once refuse is set.
type switchable struct {
	refuse atomic.Bool
	next   http.RoundTripper
}

func (s *switchable) RoundTrip(r *http.Request) (*http.Response, error) {
	if s.refuse.Load() {
		return connRefused{}.RoundTrip(r)
	}
	return s.next.RoundTrip(r)
}

func FuzzDecodeAnswers(f *testing.F) {
	f.Add("1:abc,2:zz")
	f.Add("")
	f.Add("0:1")
	f.Add(encodeAnswers([]witnessedAnswer{{hash: 1<<64 - 1, seat: 1 << 30}}))
	f.Fuzz(func(t *testing.T, s string) {
		_ = decodeAnswers(s, func(hash uint64, seat int) {
			if hash == 0 || seat < 1 {
				t.Fatalf("decoded hash %d seat %d from %q", hash, seat, s)
			}
		})
	})
}

// A replica offers itself as a witness only once it has run for its warm-up: the claims
// it forwards before that do not make it the owner's witness, the first one after does.
func TestStartingReplicaIsNoWitness(t *testing.T) {
	client := fake.NewClientset()
	fakeleases.WithOptimisticConcurrency(client)
	clock := clocktesting.NewFakeClock(time.Unix(1_000_000, 0))
	warmUp := DefaultOwnership / 4 // stepped over below, within the owner's ownership
	ls := ledgers(t, client, ledgerNS, 2, Options{Clock: clock, WitnessTimeout: time.Minute, WitnessWarmUp: warmUp})
	owner, other := ls[0], ls[1]
	offered := func(want float64) {
		t.Helper()
		if got := testutil.ToFloat64(other.metrics.offered); got != want {
			t.Fatalf("seat_witness_offered %v, want %v", got, want)
		}
	}
	offered(0)
	if s := claim(t, owner, shopRS, "first"); s != 1 {
		t.Fatalf("first claim got %d", s)
	}
	seesRecord(t, other, "held by the owner", func(r *coordinationv1.Lease) bool { return holderOf(r) == owner.identity })
	if s := claim(t, other, shopRS, "cold"); s != 2 {
		t.Fatalf("claim forwarded while starting got %d", s)
	}
	if s := claim(t, owner, shopRS, "unwitnessed"); s != 3 {
		t.Fatalf("owner's claim got %d", s)
	}
	owner.mu.Lock()
	w := owner.revs[shopRS].witnessing
	owner.mu.Unlock()
	if w.witness != "" || w.candidate != "" {
		t.Fatalf("a replica still warming up became witness %q (candidate %q)", w.witness, w.candidate)
	}
	clock.Step(warmUp)
	offered(1)
	if s := claim(t, other, shopRS, "warm"); s != 4 {
		t.Fatalf("claim forwarded after the warm-up got %d", s)
	}
	if s := claim(t, owner, shopRS, "adopting"); s != 5 {
		t.Fatalf("claim adopting the witness got %d", s)
	}
	seesRecord(t, other, "naming it the witness", func(r *coordinationv1.Lease) bool {
		return r.Annotations[strategy.AnnotationSeatWitness] == other.identity
	})
}
