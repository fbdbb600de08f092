package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// PodReview returns the AdmissionReview the API server would send for the CREATE of
// pod (which should carry its namespace and owner reference), with request UID uid.
func PodReview(pod *corev1.Pod, uid string, dryRun bool) ([]byte, error) {
	raw, err := json.Marshal(pod)
	if err != nil {
		return nil, fmt.Errorf("encoding pod: %w", err)
	}
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       types.UID(uid),
			Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Namespace: pod.Namespace,
			Name:      pod.Name,
			Operation: admissionv1.Create,
			DryRun:    &dryRun,
			Object:    runtime.RawExtension{Raw: raw},
		},
	}
	b, err := json.Marshal(review)
	if err != nil {
		return nil, fmt.Errorf("encoding AdmissionReview: %w", err)
	}
	return b, nil
}

// LoadResult is the outcome of one load run.
type LoadResult struct {
	Requests    int
	Concurrency int
	// Failed counts transport errors, non-200 answers and denied or unpatched
	// admissions (each request is expected to be placed).
	Failed    int
	FirstFail string
	Elapsed   time.Duration
	latencies Latencies
}

// Latencies are call durations, sorted.
type Latencies []time.Duration

// Quantile is the q-quantile (nearest rank), 0 without calls.
func (l Latencies) Quantile(q float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	i := int(q*float64(len(l))+0.5) - 1
	return l[min(max(i, 0), len(l)-1)]
}

// Throughput is requests per second.
func (r LoadResult) Throughput() float64 { return float64(r.Requests) / r.Elapsed.Seconds() }

// PerRequest is the elapsed time divided by the number of requests.
func (r LoadResult) PerRequest() time.Duration { return r.Elapsed / time.Duration(max(r.Requests, 1)) }

// Quantile is the q-quantile of the latencies (nearest rank).
func (r LoadResult) Quantile(q float64) time.Duration { return r.latencies.Quantile(q) }

// Max is the slowest request.
func (r LoadResult) Max() time.Duration { return r.Quantile(1) }

// Load POSTs every body to url with the given concurrency (a closed loop: each
// worker sends its next request when the previous one is answered) and expects an
// allowed response with a patch for each.
func Load(ctx context.Context, hc *http.Client, url string, bodies [][]byte, concurrency int) LoadResult {
	res := LoadResult{Requests: len(bodies), Concurrency: concurrency}
	lat := make([]time.Duration, len(bodies))
	next := make(chan int)
	var mu sync.Mutex
	fail := func(msg string) {
		mu.Lock()
		defer mu.Unlock()
		res.Failed++
		if res.FirstFail == "" {
			res.FirstFail = msg
		}
	}
	var wg sync.WaitGroup
	start := time.Now()
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				t0 := time.Now()
				msg := post(ctx, hc, url, bodies[i])
				lat[i] = time.Since(t0)
				if msg != "" {
					fail(msg)
				}
			}
		}()
	}
	for i := range bodies {
		next <- i
	}
	close(next)
	wg.Wait()
	res.Elapsed = time.Since(start)
	slices.Sort(lat)
	res.latencies = lat
	return res
}

// post sends one AdmissionReview and returns what is wrong with the answer, or "".
func post(ctx context.Context, hc *http.Client, url string, body []byte) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err.Error()
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Sprintf("status %s", resp.Status)
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(b, &review); err != nil || review.Response == nil {
		return fmt.Sprintf("not an AdmissionReview response: %.200s", b)
	}
	if !review.Response.Allowed || len(review.Response.Patch) == 0 {
		return fmt.Sprintf("pod not placed: allowed %v, warnings %v", review.Response.Allowed, review.Response.Warnings)
	}
	return ""
}
