package harness

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// SlowAPI is a reverse proxy in front of the API server that holds back some requests
// before passing them on: API-server latency, injected for the processes given its
// Kubeconfig. It calls the API server as the identity of the kubeconfig it was started
// from, so its clients need no credentials of their own.
type SlowAPI struct {
	// Kubeconfig is the path of a kubeconfig pointing at the proxy.
	Kubeconfig string
	srv        *httptest.Server
	delayed    atomic.Int64
}

// DelayFunc says how long to hold a request back (0: not at all).
type DelayFunc func(*http.Request) time.Duration

// LeaseWritesBetween delays every Lease write (create, update, patch, delete) by a
// uniformly random time in [lo, hi]: the writes the seat ledger and the convergence
// loop's leader election make.
func LeaseWritesBetween(lo, hi time.Duration) DelayFunc {
	return func(r *http.Request) time.Duration {
		if r.Method == http.MethodGet || !strings.Contains(r.URL.Path, "/leases") {
			return 0
		}
		return lo + rand.N(hi-lo+1)
	}
}

// ParseDelayRange reads "1s-3s" (or one duration, "2s") as a range of delays.
func ParseDelayRange(s string) (lo, hi time.Duration, err error) {
	a, b, found := strings.Cut(s, "-")
	if lo, err = time.ParseDuration(a); err != nil {
		return 0, 0, fmt.Errorf("delay range %q: %w", s, err)
	}
	hi = lo
	if found {
		if hi, err = time.ParseDuration(b); err != nil {
			return 0, 0, fmt.Errorf("delay range %q: %w", s, err)
		}
	}
	if lo < 0 || hi < lo {
		return 0, 0, fmt.Errorf("delay range %q: want 0 <= low <= high", s)
	}
	return lo, hi, nil
}

// StartSlowAPI starts the proxy on a loopback port for the API server and identity of
// kubeconfig, and writes a kubeconfig pointing at it (trusting its certificate) into
// dir. Stop it with Close.
func StartSlowAPI(kubeconfig, dir string, delay DelayFunc) (*SlowAPI, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("slow API: loading %s: %w", kubeconfig, err)
	}
	upstream, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("slow API: server %q: %w", cfg.Host, err)
	}
	transport, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("slow API: a transport for %s: %w", cfg.Host, err)
	}
	s := &SlowAPI{}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(upstream)
			r.Out.Header.Del("Authorization") // the proxy's identity, not the caller's
		},
		Transport:     transport,
		FlushInterval: -1, // watches stream
	}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d := delay(r); d > 0 {
			s.delayed.Add(1)
			select {
			case <-time.After(d):
			case <-r.Context().Done():
				return
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	s.srv.EnableHTTP2 = true
	s.srv.StartTLS()
	if err := s.writeKubeconfig(dir); err != nil {
		s.srv.Close()
		return nil, err
	}
	return s, nil
}

func (s *SlowAPI) writeKubeconfig(dir string) error {
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.srv.Certificate().Raw})
	kc := clientcmdapi.NewConfig()
	kc.Clusters["slow-api"] = &clientcmdapi.Cluster{Server: s.srv.URL, CertificateAuthorityData: caPEM}
	kc.AuthInfos["slow-api"] = &clientcmdapi.AuthInfo{}
	kc.Contexts["slow-api"] = &clientcmdapi.Context{Cluster: "slow-api", AuthInfo: "slow-api"}
	kc.CurrentContext = "slow-api"
	f, err := os.CreateTemp(dir, "slow-api-kubeconfig-*")
	if err != nil {
		return fmt.Errorf("slow API: kubeconfig: %w", err)
	}
	s.Kubeconfig = f.Name()
	_ = f.Close()
	if err := clientcmd.WriteToFile(*kc, s.Kubeconfig); err != nil {
		return fmt.Errorf("slow API: writing %s: %w", s.Kubeconfig, err)
	}
	return nil
}

// Delayed counts the requests held back so far.
func (s *SlowAPI) Delayed() int64 { return s.delayed.Load() }

// Close stops the proxy (its clients' connections too) and removes its kubeconfig.
func (s *SlowAPI) Close() error {
	s.srv.CloseClientConnections()
	s.srv.Close()
	if err := os.Remove(s.Kubeconfig); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("slow API: removing %s: %w", filepath.Base(s.Kubeconfig), err)
	}
	return nil
}

// Ping checks that the proxy reaches the API server (its /readyz), within ctx.
func (s *SlowAPI) Ping(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.srv.URL+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := s.srv.Client().Do(req)
	if err != nil {
		return fmt.Errorf("slow API: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("slow API: /readyz answered %s", resp.Status)
	}
	return nil
}
