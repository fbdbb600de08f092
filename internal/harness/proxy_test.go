package harness

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// tlsBackend serves /readyz (its status, after delay) and / on 127.0.0.1.
func tlsBackend(t *testing.T, status *atomic.Int32, delay time.Duration) (port int, srv *httptest.Server) {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(delay)
		w.WriteHeader(int(status.Load()))
	})
	mux.HandleFunc("/", func(http.ResponseWriter, *http.Request) {})
	srv = httptest.NewTLSServer(mux)
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().(*net.TCPAddr).Port, srv
}

// A backend whose /readyz is slower than the poll interval stays in the rotation (the kubelet's default
// probe timeout and failure threshold); one that answers 503 leaves it after three
// probes, and comes back on its first 200.
func TestProxyReadinessLikeTheKubelet(t *testing.T) {
	var okStatus, badStatus atomic.Int32
	okStatus.Store(http.StatusOK)
	badStatus.Store(http.StatusServiceUnavailable)
	// Slower than the poll interval (50 ms), within the probe timeout.
	okPort, okSrv := tlsBackend(t, &okStatus, 300*time.Millisecond)
	badPort, _ := tlsBackend(t, &badStatus, 0)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cert := okSrv.TLS.Certificates[0]
	backendTLS := okSrv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	p, err := StartProxy(port, cert, backendTLS, okPort, badPort)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	ctx, cancel := context.WithCancel(context.Background())
	p.ReadyURL = func(port int) string { return fmt.Sprintf("https://127.0.0.1:%d/readyz", port) }
	stopped := p.WatchReadiness(ctx, 50*time.Millisecond)
	t.Cleanup(func() { cancel(); <-stopped })

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: ready %v", what, []bool{p.ready[0].Load(), p.ready[1].Load()})
			}
		}
	}
	waitFor("the backend answering 503 leaves the rotation", func() bool { return !p.ready[1].Load() })
	if !p.ready[0].Load() {
		t.Fatal("a backend whose /readyz is slower than the poll interval but answers 200 left the rotation")
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: backendTLS.RootCAs, MinVersion: tls.VersionTLS12}}}
	defer client.CloseIdleConnections()
	for range 4 {
		resp, err := client.Get("https://127.0.0.1:" + strconv.Itoa(port) + "/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if got := p.Served(); got[0] != 4 || got[1] != 0 {
		t.Errorf("served %v, want all 4 requests on the ready backend", got)
	}
	// A call the backend takes 300 ms over shows as such among the calls' latencies.
	resp, err := client.Get("https://127.0.0.1:" + strconv.Itoa(port) + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if all, slow := p.Latencies(0), p.Latencies(4); len(all) != 5 || p.Answered() != 5 || len(slow) != 1 || slow[0] < 300*time.Millisecond || all.Quantile(1) != slow[0] {
		t.Errorf("latencies %v since the 5th call %v (answered %d), want 5 calls, the last over 300 ms and the slowest", all, slow, p.Answered())
	}
	badStatus.Store(http.StatusOK)
	waitFor("the backend back to 200 returns", func() bool { return p.ready[1].Load() })
}
