package placement

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook/internal/webhooktest"
)

// startServer serves m's admissions over HTTPS (HTTP/2, as the API server calls) on a
// loopback port until the test ends, through webhook's handlers.
func startServer(t testing.TB, m *PodMutator) (url string, client *http.Client) {
	t.Helper()
	h := &webhook.Handlers{Mutate: m.Admit, Ready: func() error { return nil }, Metrics: m.Metrics, Log: quietLog()}
	srv := httptest.NewUnstartedServer(h.Mux())
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL, srv.Client()
}

// 200 concurrent admissions for one ReplicaSet, before any pod exists, over real HTTPS:
// seats 1..200 each exactly once, and the per-term counts are the target for 200.
func TestConcurrentBurstOverHTTPSIsExact(t *testing.T) {
	const n = 200
	m, _, _ := newCluster(burstStrategy).mutator(t)
	url, client := startServer(t, m)
	s, _ := strategy.Parse(burstStrategy)

	reqs := make([]*admissionv1.AdmissionRequest, n)
	for i := range reqs {
		reqs[i] = webhooktest.CreateRequest(t, webhooktest.RSPod(testNS, testRSUID))
	}
	resps := make([]*admissionv1.AdmissionResponse, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			resps[i], errs[i] = webhooktest.Mutate(client, url, reqs[i])
		}()
	}
	close(start)
	wg.Wait()

	seen := map[int]bool{}
	counts := make([]int, len(s.Terms))
	for i := range reqs {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		pod := applyPatch(t, reqs[i], resps[i])
		seat, ok := strategy.SeatOf(pod)
		if !ok || seen[seat] {
			t.Fatalf("request %d: seat %d missing or handed out twice", i, seat)
		}
		seen[seat] = true
		term := s.TermOfSeat(seat)
		if !reflect.DeepEqual(pod.Spec.NodeSelector, s.Terms[term].LabelMap()) {
			t.Fatalf("seat %d: nodeSelector %v is not term %d", seat, pod.Spec.NodeSelector, term+1)
		}
		counts[term]++
	}
	for seat := 1; seat <= n; seat++ {
		if !seen[seat] {
			t.Fatalf("seat %d was never handed out", seat)
		}
	}
	if want := s.Target(n); !reflect.DeepEqual(counts, want) {
		t.Fatalf("spread %v, want %v", counts, want)
	}
}

// A review naming a ReplicaSet nobody has seen costs at most CacheGrace plus one live
// lookup, and only LiveSlots of them run at once: one more fails at once instead of
// queueing behind them. An owner that reaches the cache during the grace needs no
// live lookup at all.
func TestLiveLookupsAreBounded(t *testing.T) {
	m, _, _ := newCluster(burstStrategy).mutator(t)
	r := m.Resolver.(*clusterview.ListerResolver)
	r.CacheGrace = 50 * time.Millisecond
	r.LiveSlots = make(chan struct{}, 1)
	ctx := context.Background()
	forged := controllerRef("ReplicaSet", "no-such-rs", "forged-uid")

	start := time.Now()
	if _, err := r.Resolve(ctx, testNS, &forged); err == nil {
		t.Fatal("a forged owner resolved")
	}
	if took := time.Since(start); took < r.CacheGrace {
		t.Errorf("live lookup after %v, before the cache grace", took)
	}
	r.LiveSlots <- struct{}{} // the one live slot is busy
	start = time.Now()
	_, err := r.Resolve(ctx, testNS, &forged)
	if err == nil || !strings.Contains(err.Error(), "live lookups are already running") {
		t.Fatalf("with no live slot free: %v", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("refusal took %v", took)
	}
	// The real ReplicaSet is in the cache: no slot needed.
	cachedOwner := controllerRef("ReplicaSet", "web-5c4ff85997", testRSUID)
	if _, err := r.Resolve(ctx, testNS, &cachedOwner); err != nil {
		t.Errorf("cached owner with no live slot free: %v", err)
	}
	<-r.LiveSlots
}

// BenchmarkAdmitOverHTTPS measures real admissions of one ReplicaSet over HTTPS (HTTP/2,
// as the API server calls), 100 in flight, client and server in this process: run it
// with -cpuprofile to see where an admission's time goes outside the ledger.
func BenchmarkAdmitOverHTTPS(b *testing.B) {
	m, _, _ := newCluster(burstStrategy).mutator(b)
	url, client := startServer(b, m)
	pod := webhooktest.RSPod(testNS, testRSUID)
	b.SetParallelism(50) // 100 in flight on 2 cores
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req := webhooktest.CreateRequest(b, pod)
			if _, err := webhooktest.Mutate(client, url, req); err != nil {
				b.Error(err)
				return
			}
			// Keep the seats low and the reservations under the record's bound.
			m.Ledger.Release(context.Background(), clusterview.Revision{Namespace: testNS, UID: testRSUID}, req.UID)
		}
	})
}
