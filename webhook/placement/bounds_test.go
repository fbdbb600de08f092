package placement

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook/internal/webhooktest"
)

// twentyTerms is the largest strategy the grammar allows.
const twentyTerms = "p=a,base=3,weight=1000:p=b,weight=999:p=c,weight=7:p=d,base=1,weight=1:p=e,weight=13:" +
	"p=f,weight=500:p=g,weight=2:p=h,weight=3:p=i,weight=5:p=j,weight=11:" +
	"p=k,weight=17:p=l,weight=19:p=m,weight=23:p=n,weight=29:p=o,weight=31:" +
	"p=p,weight=37:p=q,weight=41:p=r,weight=43:p=s,weight=47:p=t,weight=53"

// stsPod is a pod of StatefulSet "db" with the given pod-index label, owned by uid.
func stsPod(index string, uid types.UID) *corev1.Pod {
	pod := webhooktest.RSPod(testNS, testRSUID)
	pod.GenerateName, pod.Name = "", "db-x"
	pod.Labels = map[string]string{"app": "db", appsv1.PodIndexLabel: index}
	pod.OwnerReferences = []metav1.OwnerReference{controllerRef("StatefulSet", "db", uid)}
	return pod
}

// Defect 1: a pod-index of MaxInt64 overflowed the seat to a negative number and
// indexed the terms with -1. Seats above strategy.MaxSeat are refused with a warning.
func TestHugePodIndexIsRefused(t *testing.T) {
	m, _, _ := newCluster(seedStrategy).mutator(t)
	for _, index := range []string{"9223372036854775807", "9223372036854775806", "2147483647", "99999999999999999999"} {
		req := webhooktest.CreateRequest(t, stsPod(index, testStatefulUID))
		resp := m.Admit(context.Background(), req)
		if !resp.Allowed || resp.Patch != nil {
			t.Fatalf("pod-index %s: want admitted unchanged, got %+v", index, resp)
		}
		if len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "pod not placed") {
			t.Errorf("pod-index %s: warnings %v", index, resp.Warnings)
		}
	}
	// The highest seat still is placed: ordinal MaxSeat-1.
	req := webhooktest.CreateRequest(t, stsPod("2147483646", testStatefulUID))
	if seat, _ := strategy.SeatOf(applyPatch(t, req, m.Admit(context.Background(), req))); seat != strategy.MaxSeat {
		t.Fatalf("ordinal MaxSeat-1 got seat %d", seat)
	}
}

// Defect 2: a seat of 1e8 on a 20-term strategy took seconds, past the API server's
// timeout. It must be placed well inside a 200 ms budget.
func TestLargeOrdinalIsPlacedQuickly(t *testing.T) {
	m, _, _ := newCluster(twentyTerms).mutator(t)
	for _, index := range []string{"100000000", "2147483646"} {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		req := webhooktest.CreateRequest(t, stsPod(index, testStatefulUID))
		start := time.Now()
		done := make(chan struct{})
		go func() {
			defer close(done)
			applyPatch(t, req, m.Admit(ctx, req))
		}()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
			t.Fatalf("pod-index %s: Admit still running after 2s", index)
		}
		cancel()
		if d := time.Since(start); d > 200*time.Millisecond {
			t.Errorf("pod-index %s: Admit took %v", index, d)
		}
	}
}

// Defect 3: a StatefulSet owner reference naming another UID than the StatefulSet's is
// forged (or stale): the pod is not placed, as for a ReplicaSet.
func TestStatefulSetOwnerUIDIsVerified(t *testing.T) {
	m, _, _ := newCluster(seedStrategy).mutator(t)
	req := webhooktest.CreateRequest(t, stsPod("3", "forged-uid"))
	resp := m.Admit(context.Background(), req)
	if !resp.Allowed || resp.Patch != nil {
		t.Fatalf("a forged StatefulSet owner was placed: %s", resp.Patch)
	}
}

// slowResolver answers like inner, but only after delay, or fails when ctx ends first.
type slowResolver struct {
	inner clusterview.WorkloadResolver
	delay time.Duration
}

func (r slowResolver) Resolve(ctx context.Context, ns string, owner *metav1.OwnerReference) (*clusterview.Workload, error) {
	select {
	case <-time.After(r.delay):
		return r.inner.Resolve(ctx, ns, owner)
	case <-ctx.Done():
		return nil, fmt.Errorf("get ReplicaSet %s/%s: %w", ns, owner.Name, ctx.Err())
	}
}

// slowLedger claims like inner, then sleeps past the deadline, ignoring ctx: the seat
// is handed out too late for the API server to use it. The claim itself ignores ctx
// too: on a loaded machine it can take longer than the deadline, and the test is about
// a seat that arrives late, not one that never arrives.
type slowLedger struct {
	SeatLedger
	delay    time.Duration
	released chan types.UID
}

func (l slowLedger) Claim(ctx context.Context, revision clusterview.Revision, admission types.UID) (int, error) {
	seat, err := l.SeatLedger.Claim(context.WithoutCancel(ctx), revision, admission)
	time.Sleep(l.delay)
	return seat, err
}

func (l slowLedger) Release(ctx context.Context, revision clusterview.Revision, admission types.UID) {
	l.SeatLedger.Release(ctx, revision, admission)
	l.released <- admission
}

// Past the admission deadline the pod is admitted unplaced with a warning, counted as
// outcome "deadline", and a seat claimed for it is given back.
func TestAdmissionDeadline(t *testing.T) {
	deadlines := func(m *PodMutator) float64 {
		return counter(t, m.Metrics, "admissions_total", map[string]string{"webhook": "mutate", "outcome": webhook.OutcomeDeadline})
	}
	t.Run("workload lookup", func(t *testing.T) {
		m, _, _ := newCluster(burstStrategy).mutator(t)
		m.Deadline = 50 * time.Millisecond
		m.Resolver = slowResolver{inner: m.Resolver, delay: time.Minute}
		req := webhooktest.CreateRequest(t, webhooktest.RSPod(testNS, testRSUID))
		start := time.Now()
		resp := m.Admit(context.Background(), req)
		if d := time.Since(start); d > time.Second {
			t.Errorf("Admit ran %v past a 50ms deadline", d)
		}
		if !resp.Allowed || resp.Patch != nil || len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "deadline exceeded") {
			t.Fatalf("want unplaced with a deadline warning, got %+v", resp)
		}
		if deadlines(m) != 1 {
			t.Errorf("deadline outcomes %v, want 1", deadlines(m))
		}
	})
	t.Run("seat claim", func(t *testing.T) {
		m, _, ledger := newCluster(burstStrategy).mutator(t)
		m.Deadline = 50 * time.Millisecond
		released := make(chan types.UID, 1)
		m.Ledger = slowLedger{SeatLedger: ledger, delay: 100 * time.Millisecond, released: released}
		req := webhooktest.CreateRequest(t, webhooktest.RSPod(testNS, testRSUID))
		resp := m.Admit(context.Background(), req)
		if !resp.Allowed || resp.Patch != nil || len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "admission deadline passed") {
			t.Fatalf("want unplaced with a deadline warning, got %+v", resp)
		}
		select {
		case uid := <-released:
			if uid != req.UID {
				t.Errorf("released %s, want %s", uid, req.UID)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the late seat was not released")
		}
		if !firstSeatFree(ledger) {
			t.Error("the late seat is still held")
		}
		if deadlines(m) != 1 {
			t.Errorf("deadline outcomes %v, want 1", deadlines(m))
		}
	})
	t.Run("in time", func(t *testing.T) {
		m, _, _ := newCluster(burstStrategy).mutator(t)
		m.Deadline = 5 * time.Second
		req := webhooktest.CreateRequest(t, webhooktest.RSPod(testNS, testRSUID))
		applyPatch(t, req, m.Admit(context.Background(), req))
	})
}

// A strategy's doubts (a term containing another's labels) reach the user at admission.
func TestContainedTermsWarnAtAdmission(t *testing.T) {
	m, _, _ := newCluster("a=1:a=1,b=2").mutator(t)
	req := webhooktest.CreateRequest(t, webhooktest.RSPod(testNS, testRSUID))
	resp := m.Admit(context.Background(), req)
	applyPatch(t, req, resp)
	if len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "on Deployment shop/web: term 2 (a=1,b=2) selects every label of term 1 (a=1)") {
		t.Fatalf("warnings %q", resp.Warnings)
	}
}
