package ledger

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/fakeleases"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/ownership"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

var shopRS = clusterview.Revision{Namespace: testNS, UID: "rs"}

// ledgers starts n SeatLedgers (n webhook replicas) on one API server, in namespace ns,
// each answering forwarded claims on a test HTTP server of its own.
func ledgers(t testing.TB, client kubernetes.Interface, ns string, n int, opts Config) []*Ledger {
	t.Helper()
	ls, _ := crashableLedgers(t, client, ns, n, opts)
	return ls
}

// crashableLedgers is ledgers, with a crash for each: it stops the ledger's informer,
// background work and writes at once, with no handover, as a killed process does.
func crashableLedgers(t testing.TB, client kubernetes.Interface, ns string, n int, opts Config) ([]*Ledger, []context.CancelFunc) {
	t.Helper()
	out := make([]*Ledger, n)
	crash := make([]context.CancelFunc, n)
	for i := range out {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		var handler atomic.Value
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			handler.Load().(http.Handler).ServeHTTP(w, r)
		}))
		t.Cleanup(srv.Close)
		o := opts
		// Unique per process, as serve's are (hostname, PID and a random part): ledgers of
		// an earlier call in the same test must not take these records for their own.
		o.Identity = fmt.Sprintf("replica-%d-%s", i, rand.Text()[:6])
		o.PeerAddress, o.PeerClient, o.ReservationTTL = srv.URL, srv.Client(), time.Minute
		l, err := New(client, ns, quietLog(), o)
		if err != nil {
			t.Fatal(err)
		}
		handler.Store(l.PeerHandler())
		l.Start(ctx)
		if !cache.WaitForCacheSync(ctx.Done(), l.HasSynced) {
			t.Fatal("seat record informer did not sync")
		}
		out[i], crash[i] = l, cancel
	}
	return out, crash
}

// burst claims n seats of revision concurrently, spread round-robin over the ledgers,
// and checks they are exactly 1..n.
func burst(t testing.TB, ls []*Ledger, revision clusterview.Revision, n int) {
	t.Helper()
	seats := make([]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			seats[i], errs[i] = ls[i%len(ls)].Claim(context.Background(), revision, types.UID(fmt.Sprintf("%s-admission-%d", revision.UID, i)))
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

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitForHolder waits until replica l sees a record of rev held by holder ("": released).
func waitForHolder(t testing.TB, l *Ledger, rev clusterview.Revision, holder string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%s to see the record of %s held by %q", l.identity, rev.UID, holder), func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		s := l.revs[rev]
		return s != nil && s.record != nil && holderOf(s.record) == holder
	})
}

// waitForWrites waits until replica l has no write of rev's record in flight.
func waitForWrites(t testing.TB, l *Ledger, rev clusterview.Revision) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%s's writes of the record of %s to land", l.identity, rev.UID), func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		s := l.revs[rev]
		return s == nil || s.writing == nil
	})
}

// placed is a live pod of revision holding seat, fulfilling reservation id.
func placed(name string, revision clusterview.Revision, seat int, id types.UID) *corev1.Pod {
	ann := map[string]string{strategy.AnnotationSeat: fmt.Sprint(seat)}
	if id != "" {
		ann[strategy.AnnotationReservation] = string(id)
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: name, Namespace: revision.Namespace, UID: types.UID(name), Annotations: ann,
		Labels:          map[string]string{strategy.LabelManaged: "true"},
		OwnerReferences: []metav1.OwnerReference{controllerRef("ReplicaSet", "web", revision.UID)},
	}}
}

func claim(t testing.TB, l *Ledger, revision clusterview.Revision, id types.UID) int {
	t.Helper()
	seat, err := l.Claim(context.Background(), revision, id)
	if err != nil {
		t.Fatalf("claim %s: %v", id, err)
	}
	return seat
}

func TestSeatLedgerOneReplica(t *testing.T) {
	client := fake.NewClientset()
	fakeleases.WithOptimisticConcurrency(client)
	clock := clocktesting.NewFakeClock(time.Unix(1_000_000, 0))
	l := ledgers(t, client, ledgerNS, 1, Config{Clock: clock})[0]
	ctx := context.Background()

	for _, s := range []int{1, 2, 4} {
		l.PodVisible(placed(fmt.Sprint("old-", s), shopRS, s, ""))
	}
	if s := claim(t, l, shopRS, "a"); s != 3 {
		t.Fatalf("lowest free seat is 3, got %d", s)
	}
	if s := claim(t, l, shopRS, "a"); s != 3 {
		t.Fatalf("a retried admission keeps seat 3, got %d", s)
	}
	if s := claim(t, l, shopRS, "b"); s != 5 {
		t.Fatalf("next free seat is 5, got %d", s)
	}
	if s, _ := l.Peek(ctx, shopRS); s != 6 {
		t.Fatalf("Peek = %d, want 6", s)
	}
	if s, _ := l.Peek(ctx, clusterview.Revision{Namespace: testNS, UID: "other"}); s != 1 {
		t.Fatalf("revisions are separate: Peek = %d, want 1", s)
	}
	l.Release(ctx, shopRS, "b")
	if s, _ := l.Peek(ctx, shopRS); s != 5 {
		t.Fatalf("a released seat is not free at once: Peek = %d", s)
	}
	if s := claim(t, l, shopRS, "c"); s != 5 {
		t.Fatalf("a released seat is handed out again, got %d", s)
	}

	// The pod of "a" (seat 3) shows up, then is deleted: the seat is free at once, not
	// at the reservation's expiry.
	podA := placed("pod-a", shopRS, 3, "a")
	l.PodVisible(podA)
	if s := claim(t, l, shopRS, "d"); s != 6 {
		t.Fatalf("got %d, want 6", s)
	}
	l.PodGone(podA)
	if s := claim(t, l, shopRS, "e"); s != 3 {
		t.Fatalf("a deleted pod's seat goes to the next pod, got %d", s)
	}
	// A pod that goes terminating frees its seat too (seen as gone with the seat).
	l.PodGone(placed("old-2", shopRS, 2, ""))
	if s := claim(t, l, shopRS, "f"); s != 2 {
		t.Fatalf("a terminating pod's seat goes to the next pod, got %d", s)
	}

	// Reservations whose pods never appear expire: seats 5 (c), 6 (d), 3 (e), 2 (f).
	clock.Step(2 * time.Minute)
	if s := claim(t, l, shopRS, "g"); s != 2 {
		t.Fatalf("after expiry the lowest free seat is 2 again, got %d", s)
	}
	if n := openReservations(l); n != 1 {
		t.Fatalf("%d reservations counted, want 1", n)
	}
	// The ownership had lapsed; taking it again wrote the record, without the expired
	// reservations.
	rec, err := client.CoordinationV1().Leases(ledgerNS).Get(ctx, recordName(shopRS.UID), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if holderOf(rec) != l.identity || rec.Annotations[strategy.AnnotationPeer] != l.cfg.PeerAddress {
		t.Fatalf("record held by %q at %q", holderOf(rec), rec.Annotations[strategy.AnnotationPeer])
	}
	if got := decodeReservations(rec.Annotations[strategy.AnnotationReservations]); len(got) != 0 {
		t.Fatalf("record holds %v, want no expired reservation", rec.Annotations[strategy.AnnotationReservations])
	}
}

func TestSeatLedgerAcrossReplicasIsExact(t *testing.T) {
	client := fake.NewClientset()
	writes := fakeleases.WithOptimisticConcurrency(client)
	burst(t, ledgers(t, client, ledgerNS, 3, Config{}), shopRS, 200)
	t.Logf("200 claims over 3 replicas: %d record writes, %d conflicts", writes.OK.Load(), writes.Conflicts.Load())
	if n := writes.OK.Load(); n > 20 {
		t.Errorf("%d record writes for 200 claims, want at most 20 (0.1 per pod)", n)
	}
}

// The race of two watch streams across a handover: replica a owns the revision and has
// seen the pod of a reservation, replica b has not. a stops and releases the revision,
// writing its reservations into the record; b takes over and must not hand the pod's
// seat out again. The reservation ends for b when b sees the pod (then its deletion
// frees the seat at once), or at expiry.
func TestLaggingReplicaKeepsSeeingTheReservation(t *testing.T) {
	client := fake.NewClientset()
	fakeleases.WithOptimisticConcurrency(client)
	ls := ledgers(t, client, ledgerNS, 2, Config{})
	a, lagging := ls[0], ls[1]
	ctx := context.Background()

	if s := claim(t, a, shopRS, "r1"); s != 1 {
		t.Fatalf("first claim got %d", s)
	}
	pod1 := placed("p1", shopRS, 1, "r1")
	a.PodVisible(pod1)
	if s := claim(t, a, shopRS, "r2"); s != 2 {
		t.Fatalf("second claim got %d", s)
	}
	a.Handover(ctx, true) // the final one releases what no peer took
	rec, err := client.CoordinationV1().Leases(ledgerNS).Get(ctx, recordName(shopRS.UID), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if holderOf(rec) != "" {
		t.Fatalf("after the handover the record is held by %q", holderOf(rec))
	}
	if got := decodeReservations(rec.Annotations[strategy.AnnotationReservations]); got[idHash("r1")] == nil || got[idHash("r2")] == nil {
		t.Fatalf("the released record lists %v: r1 (its pod seen by a) and r2 must stay", rec.Annotations[strategy.AnnotationReservations])
	}
	waitFor(t, "the lagging replica to see the release", func() bool {
		lagging.mu.Lock()
		defer lagging.mu.Unlock()
		s := lagging.revs[shopRS]
		return s != nil && s.record != nil && s.record.ResourceVersion == rec.ResourceVersion
	})
	if s := claim(t, lagging, shopRS, "r3"); s != 3 {
		t.Fatalf("a replica not seeing p1 got seat %d, want 3", s)
	}

	// p1 is deleted; the lagging replica sees the pod and its deletion (in order, on its
	// own pod watch) and frees seat 1 at once.
	lagging.PodVisible(pod1)
	lagging.PodGone(pod1)
	if s := claim(t, lagging, shopRS, "r4"); s != 1 {
		t.Fatalf("the replacement got seat %d, want 1 (where the lost pod was)", s)
	}
	// a, once it sees the new owner, forwards its claims there; having handed over, it
	// never takes the revision back.
	waitForHolder(t, a, shopRS, lagging.identity)
	if s := claim(t, a, shopRS, "r5"); s != 4 {
		t.Fatalf("a claim through the old owner got %d, want 4", s)
	}
}

// renewedOwner starts two ledgers on a fake clock; the first owns shopRS with
// reservations of seats 1..4, listed by a renewal of its record that the second has
// seen. crash kills the owner (crashableLedgers).
func renewedOwner(t *testing.T) (client *fake.Clientset, clock *clocktesting.FakeClock, owner, other *Ledger, crash func()) {
	t.Helper()
	client = fake.NewClientset()
	fakeleases.WithOptimisticConcurrency(client)
	clock = clocktesting.NewFakeClock(time.Unix(1_000_000, 0))
	ls, crashes := crashableLedgers(t, client, ledgerNS, 2, Config{Clock: clock})
	owner, other = ls[0], ls[1]
	for i := range 3 {
		if s := claim(t, owner, shopRS, types.UID(fmt.Sprint("before-", i))); s != i+1 {
			t.Fatalf("claim %d got %d", i, s)
		}
	}
	// Once the write taking the revision landed, a claim a quarter of its term later
	// renews the record (a cold start's first term is longer).
	waitForWrites(t, owner, shopRS)
	owner.mu.Lock()
	term := owner.state(shopRS).term
	owner.mu.Unlock()
	clock.Step(term / 4)
	claim(t, owner, shopRS, "renewing")
	waitFor(t, "the other replica to see the renewal listing 4 reservations", func() bool {
		other.mu.Lock()
		defer other.mu.Unlock()
		s := other.revs[shopRS]
		return s != nil && s.record != nil && len(decodeReservations(s.record.Annotations[strategy.AnnotationReservations])) == 4
	})
	return client, clock, owner, other, crashes[0]
}

// The owner dies without a handover: the others forward to it in vain until its record
// is unchanged for the ownership duration, then one takes over with the reservations
// its last write listed.
func TestOwnerDiesAnotherTakesOver(t *testing.T) {
	client, clock, _, other, crash := renewedOwner(t)
	ctx := context.Background()
	// The owner dies: its peer endpoint refuses (not as a closed port does), it writes
	// no more.
	crash()
	other.peers = &http.Client{Transport: refusing{}}

	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := other.Claim(short, shopRS, "too-early"); err == nil {
		t.Fatal("a replica took over a live owner's revision")
	}
	clock.Step(DefaultOwnership)
	// The dead owner's reservations of seats 1..4 count.
	if s := claim(t, other, shopRS, "after"); s != 5 {
		t.Fatalf("the new owner handed out %d, want 5", s)
	}
	got, _ := client.CoordinationV1().Leases(ledgerNS).Get(ctx, recordName(shopRS.UID), metav1.GetOptions{})
	if holderOf(got) != other.identity {
		t.Fatalf("record held by %q after the takeover", holderOf(got))
	}
}

// The owner's address refuses connections (its process is gone): the others take the
// revision over half an ownership duration after the first refusal, sooner than the
// record's lapse, and count the reservations its last write listed.
func TestRefusedOwnerIsTakenOverSooner(t *testing.T) {
	_, clock, _, other, crash := renewedOwner(t)
	ctx := context.Background()
	crash()
	other.peers = &http.Client{Transport: connRefused{}}

	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := other.Claim(short, shopRS, "first-refusal"); err == nil {
		t.Fatal("a replica took the revision over at the first refusal")
	}
	clock.Step(DefaultOwnership / 2)
	bounded, cancel2 := context.WithTimeout(ctx, 5*time.Second)
	defer cancel2()
	if s, err := other.Claim(bounded, shopRS, "after"); err != nil || s != 5 {
		t.Fatalf("the new owner handed out %d (%v), want 5", s, err)
	}
}

// A forwarded claim addressed to a replica that is not the one answering (its
// container restarted, its IP reused) gets 410 Gone, which the caller takes as
// evidence that the owner is gone.
func TestClaimForAnotherProcessIsGone(t *testing.T) {
	l := ledgers(t, fake.NewClientset(), ledgerNS, 1, Config{})[0]
	srv := httptest.NewServer(l.PeerHandler())
	t.Cleanup(srv.Close)
	caller := &Ledger{peers: srv.Client(), clock: clock.RealClock{}}
	_, err := caller.forward(context.Background(), "replica-0-before-restart", srv.URL, shopRS, 42, false)
	if !errors.Is(err, errOwnerGone) {
		t.Fatalf("a claim for another process: %v, want errOwnerGone", err)
	}
	if resp, err := caller.forward(context.Background(), l.identity, srv.URL, shopRS, 42, false); err != nil || resp.Seat != 1 {
		t.Fatalf("a claim for the process itself: seat %d, %v; want 1", resp.Seat, err)
	}
	// The owner's address leads back to the caller: the caller is the owner's
	// container restarted, the owner is gone.
	restarted := &Ledger{identity: l.identity, peers: caller.peers, clock: caller.clock}
	if _, err := restarted.forward(context.Background(), "replica-0-before-restart", srv.URL, shopRS, 43, false); !errors.Is(err, errOwnerGone) {
		t.Fatalf("an address leading back to the caller: %v, want errOwnerGone", err)
	}
}

// connRefused fails every request as a closed port does.
type connRefused struct{}

func (connRefused) RoundTrip(*http.Request) (*http.Response, error) {
	return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
}

// refusing fails every request, as a dead peer's address does.
type refusing struct{}

func (refusing) RoundTrip(*http.Request) (*http.Response, error) {
	return nil, errors.New("connection refused")
}

// Tenant isolation: pods of another namespace naming the victim ReplicaSet's UID in a
// controller reference neither hold the victim's seats nor end its reservations.
func TestSeatsCountOnlyTheWorkloadsOwnPods(t *testing.T) {
	client := fake.NewClientset()
	fakeleases.WithOptimisticConcurrency(client)
	l := ledgers(t, client, ledgerNS, 1, Config{})[0]
	attacker := clusterview.Revision{Namespace: "attacker", UID: shopRS.UID}
	l.PodVisible(placed("forged-1", attacker, 1, ""))
	l.PodVisible(placed("forged-2", attacker, 2, ""))
	if s := claim(t, l, shopRS, "victim-1"); s != 1 {
		t.Fatalf("forged pods in another namespace took seats: the victim's first pod got %d", s)
	}
	// A forged pod claiming the victim's reservation does not end it.
	l.PodVisible(placed("forged-3", attacker, 1, "victim-1"))
	if s := claim(t, l, shopRS, "victim-2"); s != 2 {
		t.Fatalf("a forged pod ended the victim's reservation: next seat %d, want 2", s)
	}

	// The pod cache's view is isolated the same way.
	caches, err := clusterview.NewCaches(fake.NewClientset(placed("forged", attacker, 1, ""), placed("own", shopRS, 3, "")), 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	caches.Start(ctx)
	if err := caches.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	if held := caches.Held(shopRS); len(held) != 1 || !held[3] {
		t.Fatalf("Held = %v, want only seat 3", held)
	}
}

func TestIdleRecordIsSwept(t *testing.T) {
	client := fake.NewClientset()
	writes := fakeleases.WithOptimisticConcurrency(client)
	clock := clocktesting.NewFakeClock(time.Now())
	l := ledgers(t, client, ledgerNS, 1, Config{Clock: clock})[0]
	ctx := context.Background()
	burst(t, []*Ledger{l}, shopRS, 20)
	l.sweep(ctx)
	if _, err := client.CoordinationV1().Leases(ledgerNS).Get(ctx, recordName(shopRS.UID), metav1.GetOptions{}); err != nil {
		t.Fatalf("a fresh record was swept: %v", err)
	}
	// The sweep deletes the version its informer shows (a newer one is not idle).
	waitFor(t, "the informer to show the record's last version", func() bool {
		rec, err := client.CoordinationV1().Leases(ledgerNS).Get(ctx, recordName(shopRS.UID), metav1.GetOptions{})
		obj, ok, _ := l.records.GetStore().GetByKey(ledgerNS + "/" + recordName(shopRS.UID))
		return err == nil && ok && obj.(*coordinationv1.Lease).ResourceVersion == rec.ResourceVersion
	})
	clock.Step(2*time.Minute + time.Second)
	before := writes.OK.Load()
	l.sweep(ctx)
	if _, err := client.CoordinationV1().Leases(ledgerNS).Get(ctx, recordName(shopRS.UID), metav1.GetOptions{}); err == nil {
		t.Fatal("an idle record was kept")
	}
	if n := writes.OK.Load() - before; n != 1 {
		t.Fatalf("sweeping took %d writes, want 1", n)
	}
	waitFor(t, "the revision's state to be dropped", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.revs) == 0
	})
	// A new claim after the sweep creates the record again.
	if s := claim(t, l, shopRS, "later"); s != 1 {
		t.Fatalf("claim after sweep got %d", s)
	}
}

func TestReservationsEncoding(t *testing.T) {
	exp := time.Unix(1_800_000_000, 0)
	in := map[uint64]*entry{idHash("a"): {seat: 1, expires: exp}, idHash("b"): {seat: 4000, expires: exp}}
	enc := encodeReservations(in)
	out := decodeReservations(enc + ",junk,1:zz:,0:1:1")
	if len(out) != 2 || out[idHash("a")].seat != 1 || out[idHash("b")].seat != 4000 || !out[idHash("b")].expires.Equal(exp) {
		t.Fatalf("round trip of %q: %v", enc, out)
	}
	if per := len(enc) / 2; per > 26 {
		t.Fatalf("%d bytes per reservation", per)
	}
}

// The seat choice alone, with N seats held by pods and one freed and taken again each
// iteration: O(log N).
func BenchmarkLowestFreeSeat(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprint("held=", n), func(b *testing.B) {
			s := (&Ledger{revs: map[clusterview.Revision]*revState{}, clock: clocktesting.NewFakeClock(time.Now()), cfg: Settings{ReservationTTL: time.Minute}}).state(shopRS)
			for i := 1; i <= n; i++ {
				s.seats.take(i)
			}
			now := time.Now()
			i := 0
			for b.Loop() {
				i++
				freed := 1 + (i*7919)%n
				s.seats.untake(freed)
				if got := s.lowest(now); got != freed {
					b.Fatalf("lowest = %d, want %d", got, freed)
				}
				s.seats.take(freed)
			}
		})
	}
}

// instantLeases answers Lease writes at once, without storing them: what is left of a
// Claim is the ledger's own work (seat choice, record encoding, bookkeeping).
func instantLeases(c *fake.Clientset) {
	var rv atomic.Uint64
	c.PrependReactor("*", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		switch a.GetVerb() {
		case "create", "update":
			obj := a.(k8stesting.CreateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
			obj.ResourceVersion = strconv.FormatUint(rv.Add(1), 10)
			return true, obj, nil
		}
		return false, nil, nil
	})
}

// A whole Claim on one replica with N seats held by pods, the API server's writes
// answered at once (instantLeases): each iteration deletes one held pod, claims (and
// gets its seat), and sees the new pod. The fake clock moves so reservations expire and
// the record stays at about 100 reservations.
func BenchmarkClaim(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprint("held=", n), func(b *testing.B) {
			client := fake.NewClientset()
			instantLeases(client)
			clock := clocktesting.NewFakeClock(time.Now())
			l := ledgers(b, client, ledgerNS, 1, Config{Clock: clock})[0]
			pods := make([]*corev1.Pod, n+1)
			for i := 1; i <= n; i++ {
				pods[i] = placed(fmt.Sprint("held-", i), shopRS, i, "")
				l.PodVisible(pods[i])
			}
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				i++
				victim := 1 + (i*7919)%n
				l.PodGone(pods[victim])
				id := types.UID(fmt.Sprint("adm-", i))
				seat, err := l.Claim(context.Background(), shopRS, id)
				if err != nil || seat != victim {
					b.Fatalf("claim got %d (%v), want %d", seat, err, victim)
				}
				pods[victim] = placed(fmt.Sprint("pod-", i), shopRS, seat, id)
				l.PodVisible(pods[victim])
				clock.Step(600 * time.Millisecond)
			}
		})
	}
}

// A replica is ready only where it answers at its own peer address: an address where
// another replica answers, or nobody, fails the check.
func TestCheckPeerAddress(t *testing.T) {
	ls := ledgers(t, fake.NewClientset(), ledgerNS, 2, Config{})
	ctx := context.Background()
	if err := ls[0].checkPeerAddress(ctx, false); err != nil {
		t.Fatalf("at its own address: %v", err)
	}
	ls[0].cfg.PeerAddress = ls[1].cfg.PeerAddress
	if err := ls[0].checkPeerAddress(ctx, false); err == nil || !strings.Contains(err.Error(), "PEER_ADDRESS") {
		t.Fatalf("at another replica's address: %v, want an error naming PEER_ADDRESS", err)
	}
	ls[0].cfg.PeerAddress = "http://127.0.0.1:1"
	if err := ls[0].checkPeerAddress(ctx, false); err == nil {
		t.Fatal("at an address nobody answers: no error")
	}
}

// A claim decides to take a revision nobody held, and the record of another replica
// shows up before its write starts: the write must not take the live owner's record
// (the race of a burst's first claims on several replicas: two owners, one seat twice).
func TestWriteDoesNotTakeALiveOwnersRecord(t *testing.T) {
	client := fake.NewClientset()
	fakeleases.WithOptimisticConcurrency(client)
	ls := ledgers(t, client, ledgerNS, 2, Config{})
	owner, late := ls[0], ls[1]
	if s := claim(t, owner, shopRS, "first"); s != 1 {
		t.Fatalf("first claim got %d", s)
	}
	waitForHolder(t, late, shopRS, owner.identity)
	// The write a claim started on the older view (no record).
	late.mu.Lock()
	w := late.acquire(late.state(shopRS))
	late.mu.Unlock()
	<-w.done
	rec, err := client.CoordinationV1().Leases(ledgerNS).Get(context.Background(), recordName(shopRS.UID), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if holderOf(rec) != owner.identity {
		t.Fatalf("the record is held by %q, want the live owner %q", holderOf(rec), owner.identity)
	}
	if s := claim(t, late, shopRS, "second"); s != 2 {
		t.Fatalf("a claim through the other replica got %d, want 2", s)
	}
}

// An address where another replica answers fails the self-check, and once another
// process has answered, the check keeps failing.
func TestCheckPeerAddressBehindABalancer(t *testing.T) {
	ls := ledgers(t, fake.NewClientset(), ledgerNS, 2, Config{})
	ctx := context.Background()
	var next atomic.Int64
	targets := []string{ls[0].cfg.PeerAddress, ls[1].cfg.PeerAddress}
	balancer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		target := targets[next.Add(1)%2]
		req, err := http.NewRequestWithContext(r.Context(), r.Method, target+r.URL.Path, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}))
	t.Cleanup(balancer.Close)
	own := ls[0].cfg.PeerAddress
	ls[0].cfg.PeerAddress = balancer.URL
	// As AwaitPeerAddress does, carry shared from one check to the next.
	shared := false
	for i := range 20 {
		err := ls[0].checkPeerAddress(ctx, shared)
		if !errors.Is(err, errPeerAddressShared) || !strings.Contains(err.Error(), "PEER_ADDRESS") {
			t.Fatalf("check %d behind a balancer: %v, want errPeerAddressShared naming PEER_ADDRESS", i, err)
		}
		shared = shared || errors.Is(err, errPeerAddressShared)
	}
	ls[0].cfg.PeerAddress = own
	if err := ls[0].checkPeerAddress(ctx, shared); !errors.Is(err, errPeerAddressShared) {
		t.Fatalf("after another process answered, the check passed: %v", err)
	}
	if err := ls[1].checkPeerAddress(ctx, false); err != nil {
		t.Fatalf("the other replica at its own address: %v", err)
	}
}

// Record writes that take 3 s (over half the 5 s ownership) still give ownership to
// answer in: the next write lengthens the record's duration, and claims succeed.
func TestSlowRecordWritesStillPlace(t *testing.T) {
	client := fake.NewClientset()
	client.PrependReactor("*", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetVerb() == "create" || a.GetVerb() == "update" {
			time.Sleep(3 * time.Second)
		}
		return false, nil, nil
	})
	ls := ledgers(t, client, ledgerNS, 2, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i, l := range []*Ledger{ls[0], ls[1], ls[0]} {
		seat, err := l.Claim(ctx, shopRS, types.UID(fmt.Sprintf("slow-%d", i)))
		if err != nil {
			t.Fatalf("claim %d with 3 s record writes: %v", i, err)
		}
		if seat != i+1 {
			t.Fatalf("claim %d got seat %d, want %d", i, seat, i+1)
		}
	}
	rec, err := client.CoordinationV1().Leases(ledgerNS).Get(context.Background(), recordName(shopRS.UID), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d := *rec.Spec.LeaseDurationSeconds; d < 12 {
		t.Errorf("the record's duration is %ds after 3 s writes, want it lengthened to at least 12s", d)
	}
}

// Only reservations whose pod is not seen yet count against the cap: a revision that
// admits more than maxReservations pods within the TTL, each seen in turn, keeps placing.
// Unseen ones still fill it, and the record lists them first; past it the oldest gives
// way.
func TestSeenPodsLeaveTheReservationCap(t *testing.T) {
	ls := ledgers(t, fake.NewClientset(), ledgerNS, 1, Config{})
	l := ls[0]
	ctx := context.Background()
	for i := range maxReservations {
		id := types.UID(fmt.Sprintf("seen-%d", i))
		seat, err := l.Claim(ctx, shopRS, id)
		if err != nil {
			t.Fatalf("claim %d: %v", i, err)
		}
		l.PodVisible(placed(fmt.Sprintf("pod-%d", i), shopRS, seat, id))
	}
	seat, err := l.Claim(ctx, shopRS, "one-more")
	if err != nil {
		t.Fatalf("claim %d, every earlier pod seen: %v", maxReservations+1, err)
	}
	if seat != maxReservations+1 {
		t.Fatalf("got seat %d, want %d", seat, maxReservations+1)
	}
	l.mu.Lock()
	rec := encodeReservations(l.revs[shopRS].reserved)
	l.mu.Unlock()
	if n := strings.Count(rec, ",") + 1; n > maxReservations {
		t.Errorf("the record lists %d reservations, over the cap %d", n, maxReservations)
	}
	if !strings.HasPrefix(rec, fmt.Sprintf("%d:", maxReservations+1)) {
		t.Errorf("the unseen reservation is not listed first: %.40s...", rec)
	}
	for i := range maxReservations - 1 {
		if _, err := l.Claim(ctx, shopRS, types.UID(fmt.Sprintf("unseen-%d", i))); err != nil {
			t.Fatalf("unseen claim %d: %v", i, err)
		}
	}
	// At the cap the oldest unseen reservation ("one-more", seat 9001) gives way rather
	// than a pod going unplaced.
	if seat, err := l.Claim(ctx, shopRS, "over"); err != nil || seat != maxReservations+1 {
		t.Fatalf("claim past %d unseen reservations: seat %d, %v; want the oldest's seat %d", maxReservations, seat, err, maxReservations+1)
	}
	if got := testutil.ToFloat64(l.metrics.displaced); got != 1 {
		t.Fatalf("displaced reservations: %v, want 1", got)
	}
}

// The API server calls again with the same admission UID while the first attempt still
// runs; the first one then gives up and releases. The retry's seat stays its own.
func TestReleaseOfAnAbandonedAttemptKeepsTheRetrysSeat(t *testing.T) {
	l := ledgers(t, fake.NewClientset(), ledgerNS, 1, Config{})[0]
	ctx := context.Background()
	if s := claim(t, l, shopRS, "first-pod"); s != 1 {
		t.Fatalf("first claim got %d", s)
	}
	attempt1 := claim(t, l, shopRS, "retried")
	attempt2 := claim(t, l, shopRS, "retried")
	if attempt1 != 2 || attempt2 != 2 {
		t.Fatalf("the two attempts got %d and %d, want 2 twice", attempt1, attempt2)
	}
	l.Release(ctx, shopRS, "retried") // the abandoned attempt
	if s := claim(t, l, shopRS, "next-pod"); s != 3 {
		t.Fatalf("the next pod got seat %d, want 3: the retry still holds 2", s)
	}
	l.Release(ctx, shopRS, "retried") // the retry gives up too: now it is free
	if s := claim(t, l, shopRS, "after"); s != 2 {
		t.Fatalf("after both attempts released, got seat %d, want 2", s)
	}
}

// At the drain's start the owner stops renewing but answers from memory while it owns,
// peers' claims too; the first peer that forwards a claim is handed the revision, and
// the old owner's claims go to it. The last replica, with no peer to hand over to, takes
// a revision back to answer through its drain, and releases it at the final call.
func TestHandoverAtDrainStart(t *testing.T) {
	client := fake.NewClientset()
	fakeleases.WithOptimisticConcurrency(client)
	ls := ledgers(t, client, ledgerNS, 2, Config{})
	old, next := ls[0], ls[1]
	if s := claim(t, old, shopRS, "r1"); s != 1 {
		t.Fatalf("first claim got %d", s)
	}
	waitForHolder(t, next, shopRS, old.identity)
	old.Handover(context.Background(), false)
	if s, _, err := old.claim(context.Background(), shopRS, idHash("older-peer"), false); err != nil || s != 2 {
		t.Fatalf("a peer's claim at the stopping owner: seat %d, %v; want 2 from memory", s, err)
	}
	if s := claim(t, next, shopRS, "r3"); s != 3 {
		t.Fatalf("the claim forwarded to the old owner got seat %d, want 3 (1 and 2 are its reservations)", s)
	}
	if s := claim(t, old, shopRS, "r4"); s != 4 {
		t.Fatalf("the old owner's own claim got seat %d, want 4 from the new owner", s)
	}
	waitForHolder(t, old, shopRS, next.identity)

	alone := clusterview.Revision{Namespace: testNS, UID: "rs-alone"}
	last := ledgers(t, client, ledgerNS, 1, Config{Ownership: 200 * time.Millisecond})[0]
	last.Handover(context.Background(), false)
	if s := claim(t, last, alone, "alone"); s != 1 {
		t.Fatalf("the last replica's claim through its drain got seat %d, want 1", s)
	}
	last.Handover(context.Background(), true)
	waitForHolder(t, last, alone, "")
}

// After its final hand-over (its server stops taking connections) a replica takes no
// revision back, not even as the last replica: no peer could reach it as owner. Its
// claim waits for a successor until its deadline.
func TestNoTakeBackAfterTheFinalHandover(t *testing.T) {
	client := fake.NewClientset()
	fakeleases.WithOptimisticConcurrency(client)
	last := ledgers(t, client, ledgerNS, 1, Config{Ownership: 200 * time.Millisecond})[0]
	last.Handover(context.Background(), false)
	last.Handover(context.Background(), true)
	// Ten times the 100 ms after which a claim would take the revision back: this wait
	// can only miss a fault, never fail a correct ledger.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if seat, err := last.Claim(ctx, shopRS, "after-final"); err == nil {
		t.Fatalf("a claim after the final hand-over got seat %d: the replica took the revision back", seat)
	}
	if _, err := client.CoordinationV1().Leases(ledgerNS).Get(context.Background(), recordName(shopRS.UID), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("after the final hand-over the replica wrote a record (get: %v), want none", err)
	}
}

// A hand-over that finds a renewal of the record in flight (every write is slow on a
// saturated API server) keeps answering as owner until it lands, then releases: a
// peer's claim in that time gets its seat at once rather than a 409 that sends it to
// read a record still naming the stopping owner, and the release lists that seat.
func TestHandoverAnswersUntilItsRenewalLands(t *testing.T) {
	client := fake.NewClientset()
	fakeleases.WithOptimisticConcurrency(client)
	clock := clocktesting.NewFakeClock(time.Now())
	old := ledgers(t, client, ledgerNS, 1, Config{Clock: clock})[0]
	next := ledgers(t, client, ledgerNS, 1, Config{})[0]
	ctx := context.Background()
	claim(t, old, shopRS, "r1")
	waitForWrites(t, old, shopRS)
	unblock := blockLeaseUpdates(client)
	// Past a quarter of the term, within half of it: the claim is answered and renews.
	clock.Step(6 * time.Second)
	if s := claim(t, old, shopRS, "r2"); s != 2 {
		t.Fatalf("the claim starting the renewal got seat %d, want 2", s)
	}
	handedOver := make(chan struct{})
	go func() {
		old.Handover(ctx, false)
		close(handedOver)
	}()
	waitFor(t, "the hand-over to begin", func() bool {
		old.mu.Lock()
		defer old.mu.Unlock()
		return !old.handedOver.IsZero()
	})
	answered := make(chan error, 1)
	var seat int
	go func() {
		var err error
		seat, _, err = old.claim(ctx, shopRS, idHash("peer"), false)
		answered <- err
	}()
	select {
	case err := <-answered:
		if err != nil || seat != 3 {
			t.Fatalf("a peer's claim while the renewal is in flight: seat %d, %v; want seat 3", seat, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a peer's claim waited for the renewal in flight instead of being answered")
	}
	close(unblock)
	<-handedOver
	waitForHolder(t, next, shopRS, old.identity)
	if s := claim(t, next, shopRS, "after"); s != 4 {
		t.Fatalf("the successor's first claim got seat %d, want 4 (1 to 3 are the handed-over reservations)", s)
	}
}

// A stopping owner hands a revision over with no write on anyone's path: the first
// peer forwarding a claim gets the record listing every reservation and answers as
// owner at once, while its own write of the record is held back; a second peer
// forwarding at the same time is answered through it. Nobody reads the record, no
// seat is handed out twice, and the successor's one write, when it lands, is the only
// one.
func TestHandoverWaitsForNoWrite(t *testing.T) {
	client := fake.NewClientset()
	writes := fakeleases.WithOptimisticConcurrency(client)
	var reads atomic.Int64
	client.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		reads.Add(1)
		return false, nil, nil
	})
	ls := ledgers(t, client, ledgerNS, 3, Config{Ownership: time.Minute})
	old, peers := ls[0], ls[1:]
	claim(t, old, shopRS, "r1")
	waitForWrites(t, old, shopRS)
	for _, p := range peers {
		waitForHolder(t, p, shopRS, old.identity)
	}
	before := writes.OK.Load()
	unblock := blockLeaseUpdates(client)
	old.Handover(context.Background(), false)
	seats := make([]int, len(peers))
	var wg sync.WaitGroup
	for i, p := range peers {
		wg.Go(func() { seats[i] = claim(t, p, shopRS, types.UID(fmt.Sprintf("peer-%d", i))) })
	}
	wg.Wait()
	if min(seats[0], seats[1]) != 2 || max(seats[0], seats[1]) != 3 {
		t.Fatalf("the peers' claims got seats %v, want 2 and 3 (seat 1 is the handed-over reservation)", seats)
	}
	if n, r := writes.OK.Load()-before, reads.Load(); n != 0 || r != 0 {
		t.Fatalf("the hand-over waited for %d record writes and %d reads, want none", n, r)
	}
	if s := claim(t, old, shopRS, "through-the-successor"); s != 4 {
		t.Fatalf("the stopping replica's own claim got seat %d, want 4 from its successor", s)
	}
	close(unblock)
	waitFor(t, "the successor's write of the record", func() bool {
		h := holderOf(currentRecord(t, client))
		return h == peers[0].identity || h == peers[1].identity
	})
	for _, p := range append(peers, old) {
		waitForHolder(t, p, shopRS, holderOf(currentRecord(t, client)))
	}
	for i := range 5 {
		for j, p := range peers {
			if s := claim(t, p, shopRS, types.UID(fmt.Sprintf("later-%d-%d", j, i))); s != 5+2*i+j {
				t.Fatalf("a later claim got seat %d, want %d", s, 5+2*i+j)
			}
		}
	}
	if n, r := writes.OK.Load()-before, reads.Load(); n != 1 || r != 0 {
		t.Fatalf("%d record writes and %d reads after the hand-over, want the successor's one write", n, r)
	}
}

// A revision handed over in memory is its successor's only for a quarter of the
// ownership before the successor's own write lands (a peer that finds the stopping
// replica gone waits half), and the stopping replica's final hand-over leaves its
// record alone: a release would let a third replica take the revision while the
// successor answers.
func TestTransferIsBoundedAndNotReleased(t *testing.T) {
	client := fake.NewClientset()
	fakeleases.WithOptimisticConcurrency(client)
	ls := ledgers(t, client, ledgerNS, 2, Config{Ownership: 8 * time.Second})
	old, next := ls[0], ls[1]
	claim(t, old, shopRS, "r1")
	waitForWrites(t, old, shopRS)
	waitForHolder(t, next, shopRS, old.identity)
	unblock := blockLeaseUpdates(client)
	defer close(unblock)
	old.Handover(context.Background(), false)
	if s := claim(t, next, shopRS, "r2"); s != 2 {
		t.Fatalf("the successor's claim got seat %d, want 2", s)
	}
	answered := time.Now() // after the forward's start, from which the successor owns
	next.mu.Lock()
	owned := next.revs[shopRS].ownedUntil.Sub(answered)
	next.mu.Unlock()
	if owned <= 0 || owned > 2*time.Second {
		t.Fatalf("the successor owns the revision for %s before its write lands, want at most 2s (a quarter of 8s)", owned)
	}
	finished := make(chan struct{})
	go func() {
		old.Handover(context.Background(), true)
		close(finished)
	}()
	// A release would wait for the blocked update: this wait can only miss a fault.
	select {
	case <-finished:
	case <-time.After(10 * time.Second):
		t.Fatal("the final hand-over writes the record it handed over in memory")
	}
	if h := holderOf(currentRecord(t, client)); h != old.identity {
		t.Fatalf("the record names %q, want the stopping replica until the successor's write lands", h)
	}
}

// currentRecord reads shopRS's seat record from the fake's tracker, so that the tests
// counting the ledger's reads through the client do not count it.
func currentRecord(t *testing.T, client *fake.Clientset) *coordinationv1.Lease {
	t.Helper()
	rec, err := client.Tracker().Get(coordinationv1.SchemeGroupVersion.WithResource("leases"), ledgerNS, recordName(shopRS.UID))
	if err != nil {
		t.Fatal(err)
	}
	return rec.(*coordinationv1.Lease)
}

// Three replicas take a burst while the owner of the revision stops in the middle of
// it: no seat is handed out twice across the hand-over.
func TestHandoverMidBurstHandsNoSeatOutTwice(t *testing.T) {
	client := fake.NewClientset()
	fakeleases.WithOptimisticConcurrency(client)
	ls := ledgers(t, client, ledgerNS, 3, Config{})
	claim(t, ls[0], shopRS, "first")
	const n = 300
	seats := make([]int, n)
	errs := make([]error, n)
	var done atomic.Int64
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			seats[i], errs[i] = ls[i%3].Claim(context.Background(), shopRS, types.UID(fmt.Sprintf("burst-%d", i)))
			if done.Add(1) == n/3 {
				ls[0].Handover(context.Background(), false)
			}
		})
	}
	wg.Wait()
	seen := map[int]bool{1: true}
	for i, s := range seats {
		if errs[i] != nil {
			t.Fatalf("claim %d: %v", i, errs[i])
		}
		if seen[s] || s < 2 || s > n+1 {
			t.Fatalf("seat %d handed out twice or out of 2..%d", s, n+1)
		}
		seen[s] = true
	}
}

// A caller of an older release asks for no hand-over: a stopping owner answers it
// from memory while it owns the revision; after the final hand-over it gets 409, with
// no record, and reads the record released, listing the seat it was given.
func TestOlderCallerIsAnsweredThenReleasedTo(t *testing.T) {
	client := fake.NewClientset()
	fakeleases.WithOptimisticConcurrency(client)
	old := ledgers(t, client, ledgerNS, 1, Config{Ownership: time.Minute})[0]
	srv := httptest.NewServer(old.PeerHandler())
	t.Cleanup(srv.Close)
	ctx := context.Background()
	claim(t, old, shopRS, "r1")
	waitForWrites(t, old, shopRS)
	old.Handover(ctx, false)
	ask := func() (int, peerResponse) {
		t.Helper()
		body := fmt.Sprintf(`{"namespace":%q,"revision":%q,"id":%d,"owner":%q}`, shopRS.Namespace, shopRS.UID, idHash("older-peer"), old.identity)
		resp, err := http.Post(srv.URL+PeerClaimPath, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var answer peerResponse
		if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, answer
	}
	if code, answer := ask(); code != http.StatusOK || answer.Seat != 2 || answer.Handover != nil {
		t.Fatalf("an older caller at the stopping owner: %d, seat %d; want 200 and seat 2 from memory", code, answer.Seat)
	}
	old.Handover(ctx, true)
	if code, answer := ask(); code != http.StatusConflict || answer.Handover != nil {
		t.Fatalf("an older caller after the final hand-over: %d with a record %v, want 409 without one", code, answer.Handover != nil)
	}
	rec := currentRecord(t, client)
	if holderOf(rec) != "" || len(decodeReservations(rec.Annotations[strategy.AnnotationReservations])) != 2 {
		t.Fatalf("after the final hand-over the record names %q and lists %q, want released with both seats", holderOf(rec), rec.Annotations[strategy.AnnotationReservations])
	}
}

// A replica whose clock runs two minutes behind hands a revision over; the replica
// taking it reads the reservations' time left from the record's own renew time, not by
// comparing the two clocks, so the handed-over seat stays taken.
func TestTakeoverAcrossSkewedClocks(t *testing.T) {
	client := fake.NewClientset()
	fakeleases.WithOptimisticConcurrency(client)
	behind := clocktesting.NewFakeClock(time.Now().Add(-2 * time.Minute))
	old := ledgers(t, client, ledgerNS, 1, Config{Clock: behind})[0]
	next := ledgers(t, client, ledgerNS, 1, Config{})[0]
	next.identity = "replica-next"
	if s := claim(t, old, shopRS, "in-flight"); s != 1 {
		t.Fatalf("first claim got %d", s)
	}
	waitForHolder(t, next, shopRS, old.identity)
	old.Handover(context.Background(), false)
	if s := claim(t, next, shopRS, "after-handover"); s != 2 {
		t.Fatalf("after the handover the next claim got seat %d, want 2: seat 1 is reserved for a pod not seen yet", s)
	}
}

// With an Owner, the records a replica writes carry its reference, so the garbage
// collector deletes them with the webhook's Deployment (helm uninstall).
func TestSeatRecordsCarryTheOwner(t *testing.T) {
	client := fake.NewClientset()
	fakeleases.WithOptimisticConcurrency(client)
	owner := ownership.Deployment("cksw", "deployment-uid")
	l := ledgers(t, client, ledgerNS, 1, Config{Owner: owner})[0]
	claim(t, l, shopRS, "a")
	rec, err := client.CoordinationV1().Leases(ledgerNS).Get(context.Background(), recordName(shopRS.UID), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if refs := rec.OwnerReferences; len(refs) != 1 || refs[0].Kind != "Deployment" || refs[0].Name != "cksw" || refs[0].UID != "deployment-uid" {
		t.Fatalf("record's owner references %v, want the Deployment cksw", refs)
	}
}

// A cold start on a slow API server: record writes take 3 s, and the claims of a
// 9-replica ReplicaSet arrive one every 500 ms from the start, each with the chart's
// admission deadline (ADMISSION_DEADLINE: 800 ms per timeoutSeconds, 4 s). Every one
// gets its seat within the deadline: the first write lands with ownership left (its
// term is long while no write latency is known yet) and covers the ReplicaSet's
// replicas, so no claim waits for a second write.
func TestColdStartOnSlowRecordWritesPlacesWithinTheDeadline(t *testing.T) {
	const (
		replicas = 9
		deadline = 4 * time.Second // the chart's, timeoutSeconds 5
	)
	client := fake.NewClientset()
	client.PrependReactor("*", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetVerb() == "create" || a.GetVerb() == "update" {
			time.Sleep(3 * time.Second)
		}
		return false, nil, nil
	})
	l := ledgers(t, client, ledgerNS, 1, Config{})[0]
	seats := make([]int, replicas)
	errs := make([]error, replicas)
	var wg sync.WaitGroup
	for i := range replicas {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * 500 * time.Millisecond) // arrivals, not an assertion
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			seats[i], errs[i] = l.Claim(ctx, shopRS, types.UID(fmt.Sprintf("cold-%d", i)))
		})
	}
	wg.Wait()
	seen := map[int]bool{}
	for i := range replicas {
		if errs[i] != nil {
			t.Errorf("claim %d (arriving at %v) missed the %v admission deadline: %v", i, time.Duration(i)*500*time.Millisecond, deadline, errs[i])
			continue
		}
		if seen[seats[i]] || seats[i] < 1 || seats[i] > replicas {
			t.Errorf("claim %d got seat %d twice or out of 1..%d", i, seats[i], replicas)
		}
		seen[seats[i]] = true
	}
}

// A replica of 0.2 forwards releases to the owner during a rolling upgrade: the owner
// answers them and keeps the seat reserved (it expires), never taking one for a claim.
func TestReleaseFromAnOldReplicaTakesNoSeat(t *testing.T) {
	l := ledgers(t, fake.NewClientset(), ledgerNS, 1, Config{})[0]
	srv := httptest.NewServer(l.PeerHandler())
	t.Cleanup(srv.Close)
	body := fmt.Sprintf(`{"namespace":%q,"revision":%q,"id":%d,"release":true}`, shopRS.Namespace, shopRS.UID, idHash("old"))
	resp, err := http.Post(srv.URL+PeerClaimPath, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("an old replica's release: %s, want 200", resp.Status)
	}
	if s := claim(t, l, shopRS, "first"); s != 1 {
		t.Fatalf("the first claim after an old release got seat %d, want 1", s)
	}
}

// blockLeaseUpdates holds every later Lease update of client until the returned
// channel is closed: a record write in flight for as long as a test needs.
func blockLeaseUpdates(client *fake.Clientset) chan struct{} {
	unblock := make(chan struct{})
	client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		<-unblock
		return false, nil, nil
	})
	return unblock
}

// openReservations counts l's reservations whose pods are not seen yet.
func openReservations(l *Ledger) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.revs {
		s.expire(l.clock.Now())
		n += s.open
	}
	return n
}
