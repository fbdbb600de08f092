package harness

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"time"
)

// Proxy is a TLS-terminating reverse proxy that sends each request to the next
// backend in turn (per request, not per connection: the API server multiplexes
// its webhook calls over few connections). A backend that is down answers 502,
// as a Service endpoint that has not yet been removed would fail the call.
type Proxy struct {
	// Port is the port the proxy listens on (127.0.0.1).
	Port      int
	counts    []atomic.Int64
	srv       *http.Server
	transport *http.Transport
	done      chan error
}

// StartProxy listens on 127.0.0.1:port with the given serving certificate and
// forwards to https://127.0.0.1:<backend> for each backend port, trusting tlsCfg's
// RootCAs (the backends' CA).
func StartProxy(port int, cert tls.Certificate, backendTLS *tls.Config, backends ...int) (*Proxy, error) {
	if len(backends) == 0 {
		return nil, errors.New("proxy: no backends")
	}
	transport := &http.Transport{TLSClientConfig: backendTLS, MaxIdleConnsPerHost: 100}
	p := &Proxy{Port: port, counts: make([]atomic.Int64, len(backends)), transport: transport, done: make(chan error, 1)}
	proxies := make([]*httputil.ReverseProxy, len(backends))
	for i, b := range backends {
		target := &url.URL{Scheme: "https", Host: fmt.Sprintf("127.0.0.1:%d", b)}
		proxies[i] = &httputil.ReverseProxy{
			Rewrite:   func(r *httputil.ProxyRequest) { r.SetURL(target) },
			Transport: transport,
			// A killed backend is expected in the soak: no log line per failed request.
			ErrorHandler: func(w http.ResponseWriter, _ *http.Request, _ error) { w.WriteHeader(http.StatusBadGateway) },
		}
	}
	var next atomic.Int64
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := int(next.Add(1)-1) % len(proxies)
		p.counts[i].Add(1)
		proxies[i].ServeHTTP(w, r)
	})
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return nil, fmt.Errorf("proxy listen on port %d: %w", port, err)
	}
	p.srv = &http.Server{
		Handler:           handler,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { p.done <- p.srv.ServeTLS(ln, "", "") }()
	return p, nil
}

// Served returns how many requests went to each backend, in backend order.
func (p *Proxy) Served() []int64 {
	out := make([]int64, len(p.counts))
	for i := range p.counts {
		out[i] = p.counts[i].Load()
	}
	return out
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
