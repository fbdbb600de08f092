//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// Two webhook replicas behind a round-robin balancer, as behind a Service: a
// Deployment created at 200 replicas is still exact, although the concurrent
// admissions of one ReplicaSet are split between two processes, whose seat
// reservations are group-committed to one record per revision in the API server.
func TestTwoWebhookReplicasBurst200(t *testing.T) {
	ctx := context.Background()
	second := env.webhook.replica(env.webhook.port+1, filepath.Join(env.dir, "logs", "webhook-e2e-replica2.log"))
	if err := second.start(ctx); err != nil {
		t.Fatalf("starting a second webhook replica: %v", err)
	}
	t.Cleanup(func() {
		if err := second.stop(); err != nil {
			t.Errorf("stopping the second replica: %v", err)
		}
	})
	lb := startBalancer(t, env.webhook.port+2, env.webhook.port, second.port)
	if err := env.registerAt(ctx, "full", lb.port); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.register(context.Background(), "full"); err != nil {
			t.Errorf("registering the single webhook again: %v", err)
		}
	})

	ns := newNamespace(ctx, t, "e2e-replicas")
	d := deployment(ns, "fanout", capacityStrategy, 200, true)
	createDeployment(ctx, t, d)
	assertExactSpread(ctx, t, capacityStrategy, settled(ctx, t, ns, d.Name, 200))
	for i, n := range lb.served() {
		if n == 0 {
			t.Errorf("replica %d served no admission: the burst did not exercise both replicas", i+1)
		}
	}
	t.Logf("admissions per replica (including canaries): %v", lb.served())
}

// balancer is a TLS-terminating reverse proxy that sends each request to the next
// backend in turn (per request, not per connection: the API server multiplexes
// its webhook calls over few connections). A request whose backend fails (killed,
// port closed) goes to the next one, as a Service does once the endpoint is gone
// and the API server retries a reset call.
type balancer struct {
	port   int
	counts []atomic.Int64
	// ready holds each backend's last /readyz answer (all ready until watchReadiness).
	ready []atomic.Bool
	// failed counts calls a backend failed to answer (each then went to the next).
	failed   atomic.Int64
	backends []int
	ca       *x509.CertPool
}

// total is the number of requests sent to any backend.
func (b *balancer) total() int64 {
	var n int64
	for i := range b.counts {
		n += b.counts[i].Load()
	}
	return n
}

// watchReadiness polls every backend's /readyz each interval and sends requests only
// to those that answer 200, as an endpoint controller keeps only Ready pods in a
// Service (if none is ready, every backend gets requests).
func (b *balancer) watchReadiness(t *testing.T, interval time.Duration) {
	t.Helper()
	hc := &http.Client{Timeout: interval, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: b.ca, MinVersion: tls.VersionTLS12}}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done; hc.CloseIdleConnections() })
	go func() {
		defer close(done)
		for {
			for i, p := range b.backends {
				ok := false
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("https://127.0.0.1:%d/readyz", p), nil)
				if err == nil {
					if resp, err := hc.Do(req); err == nil {
						resp.Body.Close()
						ok = resp.StatusCode == http.StatusOK
					}
				}
				b.ready[i].Store(ok)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(interval):
			}
		}
	}()
}

func (b *balancer) served() []int64 {
	out := make([]int64, len(b.counts))
	for i := range b.counts {
		out[i] = b.counts[i].Load()
	}
	return out
}

func startBalancer(t *testing.T, port int, backends ...int) *balancer {
	t.Helper()
	pki := filepath.Join(env.dir, "pki")
	pem, err := os.ReadFile(filepath.Join(pki, "ca.crt"))
	if err != nil {
		t.Fatalf("reading CA: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatal("no certificate in ca.crt")
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(pki, "webhook.crt"), filepath.Join(pki, "webhook.key"))
	if err != nil {
		t.Fatalf("loading webhook cert: %v", err)
	}
	transport := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, MaxIdleConnsPerHost: 100}
	b := &balancer{port: port, counts: make([]atomic.Int64, len(backends)), ready: make([]atomic.Bool, len(backends)), backends: backends, ca: pool}
	for i := range backends {
		b.ready[i].Store(true)
	}
	var next atomic.Int64
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		first := int(next.Add(1) - 1)
		// Ready backends in turn first, then the others: a request whose backend fails
		// (killed, port closed) goes to the next one, as the API server retries a
		// reset call; every such failure is counted.
		order := make([]int, 0, 2*len(backends))
		for _, wantReady := range []bool{true, false} {
			for k := range backends {
				if i := (first + k) % len(backends); b.ready[i].Load() == wantReady {
					order = append(order, i)
				}
			}
		}
		for _, i := range order {
			out, err := http.NewRequestWithContext(r.Context(), r.Method, fmt.Sprintf("https://127.0.0.1:%d%s", backends[i], r.URL.RequestURI()), bytes.NewReader(body))
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			out.Header = r.Header.Clone()
			resp, err := transport.RoundTrip(out)
			if err != nil {
				b.failed.Add(1)
				t.Logf("balancer: backend %d: %v", backends[i], err)
				continue
			}
			b.counts[i].Add(1)
			for k, v := range resp.Header {
				w.Header()[k] = v
			}
			w.WriteHeader(resp.StatusCode)
			_, _ = io.Copy(w, resp.Body)
			resp.Body.Close()
			return
		}
		http.Error(w, "no backend answered", http.StatusBadGateway)
	})
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatalf("balancer listen: %v", err)
	}
	srv := &http.Server{
		Handler:           handler,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() {
		if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("balancer: %v", err)
		}
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		transport.CloseIdleConnections()
	})
	return b
}
