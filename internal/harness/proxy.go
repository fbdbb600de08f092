package harness

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy is a TLS-terminating reverse proxy that sends each request to the next
// backend in turn (per request, not per connection: the API server multiplexes its
// webhook calls over few connections). Like a Service it prefers backends whose
// /readyz (on their health port, HealthPort) answered 200 (once WatchReadiness runs); a request whose backend fails
// (killed, port closed) goes to the next one, as the API server retries a reset call,
// and every such failure is counted.
type Proxy struct {
	// Port is the port the proxy listens on (127.0.0.1).
	Port int
	// ReadyURL is the readiness URL of the backend on port; nil: `serve`'s,
	// http://127.0.0.1:<HealthPort(port)>/readyz. Set it before WatchReadiness.
	ReadyURL func(port int) string
	backends []int
	counts   []atomic.Int64
	ready    []atomic.Bool
	failed   atomic.Int64
	errMu    sync.Mutex // guards errs and took
	errs     []string   // the first failures, for a test's report
	// took is every answered call's time in the proxy, from reading its body to the
	// backend's answer written: what the API server's call waited, exactly (its own
	// histogram's buckets are 2.5 s to 10 s wide where a slow call lands).
	took      []time.Duration
	next      atomic.Int64
	srv       *http.Server
	transport *http.Transport
	done      chan error
}

// StartProxy listens on 127.0.0.1:port with the given serving certificate and
// forwards to https://127.0.0.1:<backend> for each backend port, trusting
// backendTLS's RootCAs (the backends' CA).
func StartProxy(port int, cert tls.Certificate, backendTLS *tls.Config, backends ...int) (*Proxy, error) {
	if len(backends) == 0 {
		return nil, errors.New("proxy: no backends")
	}
	p := &Proxy{
		Port: port, backends: backends,
		counts: make([]atomic.Int64, len(backends)), ready: make([]atomic.Bool, len(backends)),
		transport: &http.Transport{TLSClientConfig: backendTLS, MaxIdleConnsPerHost: 100},
		done:      make(chan error, 1),
	}
	for i := range p.ready {
		p.ready[i].Store(true)
	}
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return nil, fmt.Errorf("proxy listen on port %d: %w", port, err)
	}
	p.srv = &http.Server{
		Handler:           http.HandlerFunc(p.forward),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { p.done <- p.srv.ServeTLS(ln, "", "") }()
	return p, nil
}

// forward sends one request to the ready backends in turn, then to the others.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	first := int(p.next.Add(1) - 1)
	order := make([]int, 0, len(p.backends))
	for _, wantReady := range []bool{true, false} {
		for k := range p.backends {
			if i := (first + k) % len(p.backends); p.ready[i].Load() == wantReady {
				order = append(order, i)
			}
		}
	}
	for _, i := range order {
		out, err := http.NewRequestWithContext(r.Context(), r.Method, fmt.Sprintf("https://127.0.0.1:%d%s", p.backends[i], r.URL.RequestURI()), bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		out.Header = r.Header.Clone()
		resp, err := p.transport.RoundTrip(out)
		if err != nil {
			p.failed.Add(1)
			p.errMu.Lock()
			if len(p.errs) < 10 {
				p.errs = append(p.errs, fmt.Sprintf("backend %d (ready %v) at %s: %v", p.backends[i], p.ready[i].Load(), time.Now().Format("15:04:05.000"), err))
			}
			p.errMu.Unlock()
			continue
		}
		p.counts[i].Add(1)
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
		_ = resp.Body.Close()
		p.errMu.Lock()
		p.took = append(p.took, time.Since(start))
		p.errMu.Unlock()
		return
	}
	http.Error(w, "no backend answered", http.StatusBadGateway)
}

// Readiness probing as the kubelet does it by default: a probe times out after a second,
// and a backend is not ready after three failed probes in a row, ready again after one
// success. A single slow answer of a busy backend must not take it out of the rotation
// (with every backend out, requests would go to one that is shutting down).
const (
	probeTimeout     = time.Second
	failureThreshold = 3
)

// WatchReadiness probes every backend's /readyz each interval until ctx ends (all at
// once, so that a slow one delays no other), and sends requests to the ready ones first,
// as an endpoint controller keeps only Ready pods in a Service. The returned channel is
// closed when it stopped.
func (p *Proxy) WatchReadiness(ctx context.Context, interval time.Duration) <-chan struct{} {
	hc := &http.Client{Timeout: probeTimeout, Transport: &http.Transport{TLSClientConfig: p.transport.TLSClientConfig}}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		defer hc.CloseIdleConnections()
		failures := make([]int, len(p.backends))
		for {
			var wg sync.WaitGroup
			for i, b := range p.backends {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if probeReady(ctx, hc, p.readyURL(b)) {
						failures[i] = 0
						p.ready[i].Store(true)
					} else if failures[i]++; failures[i] >= failureThreshold {
						p.ready[i].Store(false)
					}
				}()
			}
			wg.Wait()
			select {
			case <-ctx.Done():
				return
			case <-time.After(interval):
			}
		}
	}()
	return stopped
}

func (p *Proxy) readyURL(port int) string {
	if p.ReadyURL != nil {
		return p.ReadyURL(port)
	}
	return fmt.Sprintf("http://127.0.0.1:%d/readyz", HealthPort(port))
}

// probeReady reports whether the backend's readiness URL answers 200.
func probeReady(ctx context.Context, hc *http.Client, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// MarkNotReady takes the backend on port out of the ready ones at once, as the kubelet
// marks a pod NotReady when its container dies; WatchReadiness puts it back once its
// /readyz answers 200 (a restarted process, once it is ready).
func (p *Proxy) MarkNotReady(port int) {
	for i, b := range p.backends {
		if b == port {
			p.ready[i].Store(false)
		}
	}
}

// Served returns how many requests each backend answered, in backend order.
func (p *Proxy) Served() []int64 {
	out := make([]int64, len(p.counts))
	for i := range p.counts {
		out[i] = p.counts[i].Load()
	}
	return out
}

// Total returns how many requests any backend answered.
func (p *Proxy) Total() int64 {
	var n int64
	for _, c := range p.Served() {
		n += c
	}
	return n
}

// Failed returns how many calls a backend failed to answer (each then went to the next).
func (p *Proxy) Failed() int64 { return p.failed.Load() }

// Failures describes the first of those failures: backend, readiness, time, error.
func (p *Proxy) Failures() []string {
	p.errMu.Lock()
	defer p.errMu.Unlock()
	return append([]string(nil), p.errs...)
}

// Latencies returns the time each answered call spent in the proxy since the index-th
// answered call (0: all), sorted: the backends' time, retries included.
func (p *Proxy) Latencies(since int) Latencies {
	p.errMu.Lock()
	out := append(Latencies(nil), p.took[min(since, len(p.took)):]...)
	p.errMu.Unlock()
	slices.Sort(out)
	return out
}

// Answered counts the calls answered so far: an index for Latencies.
func (p *Proxy) Answered() int {
	p.errMu.Lock()
	defer p.errMu.Unlock()
	return len(p.took)
}

// Close stops the proxy and returns the server's error, if it failed other than by closing.
func (p *Proxy) Close(ctx context.Context) error {
	err := p.srv.Shutdown(ctx)
	p.transport.CloseIdleConnections()
	if serr := <-p.done; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		return fmt.Errorf("proxy: %w", serr)
	}
	if err != nil {
		return fmt.Errorf("proxy shutdown: %w", err)
	}
	return nil
}
