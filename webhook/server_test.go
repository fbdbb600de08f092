package webhook

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/testcert"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook/internal/webhooktest"
)

// startServer serves handlers over HTTPS on an ephemeral port with a certificate
// watched on disk, and returns the base URL, the cert paths and a client that trusts
// any certificate the test issued (it pins nothing: rotation tests read the peer cert).
func startServer(t testing.TB, h *Handlers) (url, certFile, keyFile string, client *http.Client) {
	t.Helper()
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	certPEM, keyPEM := testcert.SelfSigned(t, 1)
	writeFile(t, certFile, certPEM)
	writeFile(t, keyFile, keyPEM)
	watcher, err := certwatcher.New(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _ = watcher.Start(ctx) }()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, h.Mux(), watcher.GetCertificate, quietLog()) }()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		// Like the API server: HTTP/2, many admissions multiplexed on few connections.
		ForceAttemptHTTP2: true,
	}}
	t.Cleanup(func() {
		// As a client going away would, before the server stops; and again until it has
		// stopped: a dial the transport started for a request that another connection
		// then served may finish after the first call and park one more connection, which
		// held the server's shutdown to its 10 s limit on a loaded machine.
		client.CloseIdleConnections()
		cancel()
		for {
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Serve: %v", err)
				}
				return
			case <-time.After(50 * time.Millisecond):
				client.CloseIdleConnections()
			}
		}
	})
	return "https://" + ln.Addr().String(), certFile, keyFile, client
}

func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestServerRejectsBadRequests(t *testing.T) {
	url, _, _, client := startServer(t, stubHandlers())
	cases := map[string]string{
		"not JSON":   "{{{",
		"no request": `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`,
		"v1beta1":    `{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"x"}}`,
	}
	for name, body := range cases {
		resp, err := client.Post(url+"/mutate", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: status %d, want 400", name, resp.StatusCode)
		}
	}
	resp, err := client.Get(url + "/mutate")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /mutate: status %d, want 405", resp.StatusCode)
	}
}

// The pod of a review is decoded once, by the server, straight into a Pod: the mutator
// gets it decoded and no raw copy of it.
func TestPodReviewIsDecodedOnce(t *testing.T) {
	var got *corev1.Pod
	var raw int
	h := &Handlers{
		Mutate: func(_ context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			got, _ = req.Object.Object.(*corev1.Pod)
			raw = len(req.Object.Raw)
			return Allow()
		},
		Ready: func() error { return nil }, Metrics: NewMetrics(), Log: quietLog(),
	}
	url, _, _, client := startServer(t, h)
	pod := webhooktest.RSPod("demo", "rs-uid")
	if _, err := webhooktest.Mutate(client, url, webhooktest.CreateRequest(t, pod)); err != nil {
		t.Fatal(err)
	}
	if got == nil || got.GenerateName != pod.GenerateName || len(got.OwnerReferences) != 1 || raw != 0 {
		t.Fatalf("the mutator got pod %v and %d raw bytes; want the decoded pod and none", got, raw)
	}
}

func TestAdmissionPanicAdmitsUnchanged(t *testing.T) {
	h := &Handlers{
		Mutate: func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			var m map[string]int
			m["boom"]++ // a nil-map write: the kind of bug that must not block pods
			return nil
		},
		Ready: func() error { return nil }, Metrics: NewMetrics(), Log: quietLog(),
	}
	url, _, _, client := startServer(t, h)
	resp, err := webhooktest.Mutate(client, url, webhooktest.CreateRequest(t, webhooktest.RSPod("demo", "rs-uid")))
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Allowed || resp.Patch != nil || len(resp.Warnings) != 1 {
		t.Fatalf("want allowed, unchanged, one warning: %+v", resp)
	}
}

// startPlain serves handler on a plain HTTP port with ServePlain until the test ends.
func startPlain(t *testing.T, handler http.Handler) string {
	t.Helper()
	return "http://" + serveUntilCleanup(t, func(ctx context.Context, ln net.Listener) error {
		return ServePlain(ctx, ln, handler, "test", quietLog())
	})
}

// serveUntilCleanup runs serve on a loopback port until the test ends, then checks it
// returned no error; it returns the listener's address.
func serveUntilCleanup(t testing.TB, serve func(context.Context, net.Listener) error) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serving on %s: %v", ln.Addr(), err)
		}
	})
	return ln.Addr().String()
}

// get GETs url and returns the status and body.
func get(t *testing.T, client *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// Probes are on the health port, /metrics on the metrics port (plain HTTP both), and
// the HTTPS port serves neither.
func TestPortsServeTheirOwnEndpoints(t *testing.T) {
	ready := errors.New("caches not synced: pods, nodepools")
	h := &Handlers{Ready: func() error { return ready }, Metrics: NewMetrics(), Log: quietLog()}
	url, _, _, client := startServer(t, h)
	health := startPlain(t, h.HealthMux())
	metrics := startPlain(t, h.MetricsMux())
	plain := http.DefaultClient
	if s, _ := get(t, plain, health+"/healthz"); s != http.StatusOK {
		t.Errorf("/healthz %d", s)
	}
	if s, body := get(t, plain, health+"/readyz"); s != http.StatusServiceUnavailable || !strings.Contains(body, "pods, nodepools") {
		t.Errorf("/readyz before sync: %d %q, want 503 naming the caches", s, body)
	}
	ready = nil
	if s, _ := get(t, plain, health+"/readyz"); s != http.StatusOK {
		t.Errorf("/readyz after sync %d", s)
	}
	if s, body := get(t, plain, metrics+"/metrics"); s != http.StatusOK || !strings.Contains(body, "go_goroutines") {
		t.Errorf("/metrics %d, Go collector there: %v", s, strings.Contains(body, "go_goroutines"))
	}
	for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
		if s, _ := get(t, client, url+path); s != http.StatusNotFound {
			t.Errorf("HTTPS port %s: %d, want 404", path, s)
		}
		if s, _ := get(t, plain, metrics+path); path != "/metrics" && s != http.StatusNotFound {
			t.Errorf("metrics port %s: %d, want 404", path, s)
		}
	}
	if s, _ := get(t, plain, health+"/metrics"); s != http.StatusNotFound {
		t.Errorf("health port /metrics: %d, want 404", s)
	}
}

func TestProfilesOnlyWhenProfiling(t *testing.T) {
	for _, on := range []bool{false, true} {
		h := &Handlers{Ready: func() error { return nil }, Metrics: NewMetrics(), Log: quietLog(), Profiling: on}
		metrics := startPlain(t, h.MetricsMux())
		status, body := get(t, http.DefaultClient, metrics+"/debug/pprof/heap?debug=1")
		want := http.StatusNotFound
		if on {
			want = http.StatusOK
		}
		if status != want {
			t.Errorf("Profiling %v: /debug/pprof/heap %d, want %d", on, status, want)
		}
		if on && !strings.Contains(body, "heap profile") {
			t.Errorf("Profiling on: /debug/pprof/heap is not a heap profile: %.100q", body)
		}
		url, _, _, client := startServer(t, h)
		if s, _ := get(t, client, url+"/debug/pprof/heap?debug=1"); s != http.StatusNotFound {
			t.Errorf("Profiling %v: the HTTPS port serves /debug/pprof/heap (%d)", on, s)
		}
	}
}

func TestTLSBelow12IsRefused(t *testing.T) {
	h := &Handlers{Ready: func() error { return nil }, Metrics: NewMetrics(), Log: quietLog()}
	url, _, _, _ := startServer(t, h)
	conn, err := tls.Dial("tcp", strings.TrimPrefix(url, "https://"), &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS11}) //nolint:gosec // the point of the test
	if err == nil {
		conn.Close()
		t.Fatal("a TLS 1.1 handshake succeeded")
	}
}

// A certificate rewritten on disk is served without a restart.
func TestServingCertificateReloads(t *testing.T) {
	h := &Handlers{Ready: func() error { return nil }, Metrics: NewMetrics(), Log: quietLog()}
	url, certFile, keyFile, _ := startServer(t, h)
	served := func() int64 {
		conn, err := tls.Dial("tcp", strings.TrimPrefix(url, "https://"), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // reads the peer certificate only
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
	}
	if got := served(); got != 1 {
		t.Fatalf("serial %d, want 1", got)
	}
	certPEM, keyPEM := testcert.SelfSigned(t, 2)
	writeFile(t, keyFile, keyPEM)
	writeFile(t, certFile, certPEM)
	deadline := time.Now().Add(30 * time.Second)
	for served() != 2 {
		if time.Now().After(deadline) {
			t.Fatal("the rotated certificate was not served within 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
