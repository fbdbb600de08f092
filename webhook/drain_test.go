package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/testcert"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook/internal/webhooktest"
)

// On the stop signal /readyz fails at once, admissions are still served during the
// drain period, End runs after it while the server still answers, an admission in
// flight when the period ends finishes, and only then does ServeDrain return.
func TestDrainKeepsServingUntilInFlightFinish(t *testing.T) {
	var draining atomic.Bool
	slow := make(chan struct{})
	h := &Handlers{
		Mutate: func(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			if req.Namespace == "slow" {
				<-slow
			}
			return Allow()
		},
		Ready: func() error {
			if draining.Load() {
				return context.Canceled
			}
			return nil
		},
		Metrics: NewMetrics(), Log: quietLog(),
	}
	const period = 700 * time.Millisecond
	var (
		url    string
		client *http.Client
		endErr = make(chan error, 1)
	)
	end := func() {
		_, err := webhooktest.Mutate(client, url, webhooktest.CreateRequest(t, webhooktest.RSPod("demo", "rs-uid")))
		endErr <- err
	}
	url, client, signal, done := startDrain(t, h, Drain{Period: period, Begin: func() { draining.Store(true) }, End: end}, true)
	health := startPlain(t, h.HealthMux())
	status := func(path string) int {
		resp, err := http.Get(health + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := status("/readyz"); s != http.StatusOK {
		t.Fatalf("/readyz %d before the stop signal", s)
	}
	slowReq := webhooktest.CreateRequest(t, webhooktest.RSPod("demo", "rs-uid"))
	slowReq.Namespace = "slow"
	slowDone := make(chan error, 1)
	go func() { _, err := webhooktest.Mutate(client, url, slowReq); slowDone <- err }()

	signal()
	time.Sleep(100 * time.Millisecond)
	if s := status("/readyz"); s != http.StatusServiceUnavailable {
		t.Errorf("/readyz %d during the drain, want 503", s)
	}
	if _, err := webhooktest.Mutate(client, url, webhooktest.CreateRequest(t, webhooktest.RSPod("demo", "rs-uid"))); err != nil {
		t.Errorf("admission during the drain: %v", err)
	}
	if err := <-endErr; err != nil {
		t.Errorf("admission during End: %v", err)
	}
	time.Sleep(100 * time.Millisecond) // past End: the server now waits for the slow one
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
	if _, err := client.Get(url + "/mutate"); err == nil {
		t.Error("still serving after ServeDrain returned")
	}
}

// An HTTP/1.1 connection idle when the stop signal comes stays open: the next request
// on it is served (closing idle connections at once races a client sending on one: it
// gets EOF), and its answer closes the connection, so the client reconnects elsewhere.
func TestDrainServesIdleConnectionsThenClosesThem(t *testing.T) {
	h := &Handlers{Mutate: func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse { return Allow() },
		Ready: func() error { return nil }, Metrics: NewMetrics(), Log: quietLog()}
	// HTTP/1.1 with keep-alives.
	url, client, signal, done := startDrain(t, h, Drain{Period: time.Second}, false)
	post := func() (reused bool, resp *http.Response) {
		t.Helper()
		body, err := json.Marshal(admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Request:  webhooktest.CreateRequest(t, webhooktest.RSPod("demo", "rs-uid")),
		})
		if err != nil {
			t.Fatal(err)
		}
		req, err := http.NewRequest(http.MethodPost, url+"/mutate", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			GotConn: func(info httptrace.GotConnInfo) { reused = info.Reused },
		}))
		resp, err = client.Do(req)
		if err != nil {
			t.Fatalf("admission: %v", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return reused, resp
	}
	if _, resp := post(); resp.Close {
		t.Fatal("the server closed the connection before the stop signal")
	}
	signal()
	time.Sleep(200 * time.Millisecond) // the drain has begun
	reused, resp := post()
	if !reused {
		t.Error("the connection idle at the stop signal was closed: a request sent on it then fails")
	}
	if resp.StatusCode != http.StatusOK || !resp.Close {
		t.Errorf("during the drain: status %d, Connection: close %v; want 200 and the connection closed after it", resp.StatusCode, resp.Close)
	}
	if reused, _ := post(); reused {
		t.Error("a connection answered with Connection: close was used again")
	}
	if err := <-done; err != nil {
		t.Errorf("ServeDrain: %v", err)
	}
}

// startDrain runs ServeDrain with h on a loopback port and a fresh certificate, and
// returns its URL, a client trusting it (HTTP/2 with forceHTTP2, else HTTP/1.1 with
// keep-alives), the stop signal and ServeDrain's result.
func startDrain(t *testing.T, h *Handlers, d Drain, forceHTTP2 bool) (url string, client *http.Client, signal context.CancelFunc, done <-chan error) {
	t.Helper()
	certPEM, keyPEM := testcert.SelfSigned(t, 1)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stop, signal := context.WithCancel(context.Background())
	t.Cleanup(signal)
	result := make(chan error, 1)
	getCert := func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &cert, nil }
	go func() { result <- ServeDrain(stop, ln, h.Mux(), getCert, d, quietLog()) }()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, ForceAttemptHTTP2: forceHTTP2,
	}}
	t.Cleanup(client.CloseIdleConnections)
	return "https://" + ln.Addr().String(), client, signal, result
}
