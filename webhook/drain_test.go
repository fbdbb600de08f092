package webhook

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
)

// On the stop signal /readyz fails at once, admissions are still served during the
// drain period, an admission in flight when the period ends finishes, and only then
// does ServeDrain return.
func TestDrainKeepsServingUntilInFlightFinish(t *testing.T) {
	var draining atomic.Bool
	slow := make(chan struct{})
	h := &Handlers{
		Mutate: func(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			if req.Namespace == "slow" {
				<-slow
			}
			return allow()
		},
		Ready: func() error {
			if draining.Load() {
				return context.Canceled
			}
			return nil
		},
		Metrics: NewMetrics(), Log: quietLog(),
	}
	dir := t.TempDir()
	certPEM, keyPEM := issueCert(t, 1)
	writeFile(t, filepath.Join(dir, "tls.crt"), certPEM)
	writeFile(t, filepath.Join(dir, "tls.key"), keyPEM)
	watcher, err := certwatcher.New(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stop, signal := context.WithCancel(context.Background())
	defer signal()
	done := make(chan error, 1)
	const period = 700 * time.Millisecond
	go func() {
		done <- ServeDrain(stop, ln, h.Mux(), watcher.GetCertificate, Drain{Period: period, Begin: func() { draining.Store(true) }}, quietLog())
	}()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, ForceAttemptHTTP2: true}}
	url := "https://" + ln.Addr().String()
	status := func(path string) int {
		resp, err := client.Get(url + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := status("/readyz"); s != http.StatusOK {
		t.Fatalf("/readyz %d before the stop signal", s)
	}
	slowReq := createRequest(t, rsPod())
	slowReq.Namespace = "slow"
	slowDone := make(chan error, 1)
	go func() { _, err := postReview(client, url, slowReq); slowDone <- err }()

	signal()
	time.Sleep(100 * time.Millisecond)
	if s := status("/readyz"); s != http.StatusServiceUnavailable {
		t.Errorf("/readyz %d during the drain, want 503", s)
	}
	if _, err := postReview(client, url, createRequest(t, rsPod())); err != nil {
		t.Errorf("admission during the drain: %v", err)
	}
	time.Sleep(period) // past the drain period: the server now waits for the slow one
	select {
	case err := <-done:
		t.Fatalf("ServeDrain returned (%v) with an admission in flight", err)
	default:
	}
	close(slow)
	if err := <-slowDone; err != nil {
		t.Errorf("the admission in flight at shutdown: %v", err)
	}
	if err := <-done; err != nil {
		t.Errorf("ServeDrain: %v", err)
	}
	if _, err := client.Get(url + "/healthz"); err == nil {
		t.Error("still serving after ServeDrain returned")
	}
}
