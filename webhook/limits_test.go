package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook/internal/webhooktest"
)

// A body declared over the cap is refused before it is read; one sent without a
// length is cut at the cap.
func TestBodyOverCapIsRefused(t *testing.T) {
	url, _, _, client := startServer(t, stubHandlers())
	body := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"` + strings.Repeat("x", MaxBodyBytes) + `"}}`
	resp, err := client.Post(url+"/mutate", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("declared length over the cap: status %d, want 413", resp.StatusCode)
	}
	// io.MultiReader hides the length: the request goes out chunked.
	resp, err = client.Post(url+"/mutate", "application/json", io.MultiReader(strings.NewReader(body)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("chunked body over the cap: status %d, want 400", resp.StatusCode)
	}
}

// Admissions over MaxInFlight wait QueueWait, then get 429 without being read; the
// ones in flight are answered normally.
func TestExcessAdmissionsGet429(t *testing.T) {
	release := make(chan struct{})
	var entered atomic.Int32
	h := &Handlers{
		Mutate: func(ctx context.Context, _ *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			entered.Add(1)
			<-release
			return Allow()
		},
		Ready: func() error { return nil }, Metrics: NewMetrics(), Log: quietLog(),
		Limits: AdmissionLimits{MaxInFlight: 2, QueueWait: 200 * time.Millisecond},
	}
	url, _, _, client := startServer(t, h)
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := webhooktest.Mutate(client, url, webhooktest.CreateRequest(t, webhooktest.RSPod("demo", "rs-uid")))
			errs <- err
		}()
	}
	for entered.Load() < 2 {
		time.Sleep(5 * time.Millisecond)
	}
	start := time.Now()
	_, err := webhooktest.Mutate(client, url, webhooktest.CreateRequest(t, webhooktest.RSPod("demo", "rs-uid")))
	if err == nil || !strings.Contains(err.Error(), "429") {
		t.Fatalf("third admission: %v, want 429", err)
	}
	if waited := time.Since(start); waited < 200*time.Millisecond {
		t.Errorf("refused after %v, before the queue wait", waited)
	}
	close(release)
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("admission in flight: %v", err)
		}
	}
	if _, err := webhooktest.Mutate(client, url, webhooktest.CreateRequest(t, webhooktest.RSPod("demo", "rs-uid"))); err != nil {
		t.Errorf("admission after the burst: %v", err)
	}
}

// peakRSS returns the process's peak resident set (VmHWM) in bytes, 0 where /proc has none.
func peakRSS(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmHWM:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	return 0
}

// chartMemoryLimit is the memory limit of the Helm chart's webhook container.
const chartMemoryLimit = 256 << 20

// Many concurrent maximum-size AdmissionReviews (pods with a 3 MiB annotation, each
// decoded and answered with a patch) keep the process well
// under the chart's memory limit: the gate admits only MaxInFlightBytes at once.
// Bodies are streamed to the handler, so the test's own side holds none of them.
func TestMaxBodyLoadStaysUnderMemoryLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	const clients = 64
	h := stubHandlers()
	h.Limits = AdmissionLimits{QueueWait: 2 * time.Minute} // defaults, but nobody is turned away
	mux := h.Mux()

	// A review whose pod carries one annotation filling the body up to the cap.
	pod := webhooktest.RSPod("demo", "rs-uid")
	pod.Annotations = map[string]string{"filler": "@@FILL@@"}
	review := admissionv1.AdmissionReview{Request: webhooktest.CreateRequest(t, pod)}
	review.APIVersion, review.Kind = "admission.k8s.io/v1", "AdmissionReview"
	tmpl, err := json.Marshal(review)
	if err != nil {
		t.Fatal(err)
	}
	head, tail, _ := bytes.Cut(tmpl, []byte("@@FILL@@"))
	fill := int64(MaxBodyBytes - len(head) - len(tail) - 64) // room for the UID swap below
	uidAt := bytes.Index(head, []byte(string(review.Request.UID)))

	runtime.GC()
	var peakHeap atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > peakHeap.Load() {
				peakHeap.Store(ms.HeapAlloc)
			}
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	var wg sync.WaitGroup
	codes := make([]int, clients)
	start := time.Now()
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := bytes.Clone(head)
			copy(h[uidAt:], []byte(strconv.Itoa(100000+i))) // distinct UIDs: distinct claims
			body := io.MultiReader(bytes.NewReader(h), io.LimitReader(repeatByte('a'), fill), bytes.NewReader(tail))
			req := httptest.NewRequest(http.MethodPost, "/mutate", body)
			req.ContentLength = int64(len(h)) + fill + int64(len(tail))
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, req)
			codes[i] = rec.Code
			if rec.Code == http.StatusOK && !bytes.Contains(rec.Body.Bytes(), []byte(`"patch"`)) {
				codes[i] = -1
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-sampled
	for i, c := range codes {
		if c != http.StatusOK {
			t.Fatalf("review %d: status %d (-1: answered without a patch)", i, c)
		}
	}
	heap, rss := int64(peakHeap.Load()), peakRSS(t)
	t.Logf("%d concurrent reviews of %d bytes placed in %v: peak heap %d MiB, peak RSS of the test process %d MiB (chart limit %d MiB)",
		clients, MaxBodyBytes-64, time.Since(start).Round(time.Millisecond), heap>>20, rss>>20, chartMemoryLimit>>20)
	if heap > chartMemoryLimit/2 {
		t.Errorf("peak heap %d MiB is over half the chart's %d MiB limit", heap>>20, chartMemoryLimit>>20)
	}
	// The heap bound above holds under -race too; RSS is only meaningful without it.
	if rss > chartMemoryLimit*3/4 && !raceEnabled {
		t.Errorf("peak RSS %d MiB is over 3/4 of the chart's %d MiB limit", rss>>20, chartMemoryLimit>>20)
	}
}

// repeatByte is an endless reader of one byte.
type repeatByte byte

func (r repeatByte) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r)
	}
	return len(p), nil
}

// A request that finds room is let in however long its goroutine waited for the CPU
// since its queue timer started: here the timer (1 ns) is always over before the
// gate looks, as on a loaded machine where the burst test saw 429 with 200 admissions
// under a cap of 256. Only a request that finds no room waits and may be refused.
func TestRoomIsTakenEvenAfterTheQueueWait(t *testing.T) {
	g := newAdmissionGate(AdmissionLimits{MaxInFlight: 2, QueueWait: time.Nanosecond})
	req := httptest.NewRequest(http.MethodPost, "/mutate", strings.NewReader("{}"))
	var leaves []func()
	for i := range 2 {
		leave, refused := g.enter(context.Background(), req)
		if refused != nil {
			t.Fatalf("admission %d of 2 under a cap of 2: %d %s", i+1, refused.status, refused.msg)
		}
		leaves = append(leaves, leave)
	}
	if _, refused := g.enter(context.Background(), req); refused == nil || refused.status != http.StatusTooManyRequests {
		t.Fatalf("a third admission under a cap of 2: %v, want 429", refused)
	}
	for _, leave := range leaves {
		leave()
	}
	if _, refused := g.enter(context.Background(), req); refused != nil {
		t.Fatalf("after the others left: %v", refused)
	}
}
