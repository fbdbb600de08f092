package harness

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain lets the test binary stand in for the webhook: run with
// HARNESS_FAKE_SERVE=1 it is a `serve` process (see fakeServe).
func TestMain(m *testing.M) {
	if os.Getenv("HARNESS_FAKE_SERVE") == "1" {
		fakeServe()
		return
	}
	os.Exit(m.Run())
}

// fakeServe listens like `serve`: TLS on LISTEN_ADDRESS, /metrics on METRICS_ADDRESS
// and /readyz on HEALTH_ADDRESS; on SIGTERM it waits FAKE_DRAIN, then exits with
// status FAKE_EXIT.
func fakeServe() {
	cert, err := tls.LoadX509KeyPair(os.Getenv("TLS_CERT_FILE"), os.Getenv("TLS_KEY_FILE"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	health := http.NewServeMux()
	health.HandleFunc("/readyz", func(http.ResponseWriter, *http.Request) {})
	metrics := http.NewServeMux()
	metrics.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "# TYPE fake_pid gauge\nfake_pid %d\n", os.Getpid())
	})
	srv := &http.Server{
		Addr: os.Getenv("LISTEN_ADDRESS"), Handler: http.NewServeMux(), ReadHeaderTimeout: time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
	}
	go func() {
		err := srv.ListenAndServeTLS("", "")
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}()
	for _, p := range []struct {
		env     string
		handler http.Handler
	}{{"METRICS_ADDRESS", metrics}, {"HEALTH_ADDRESS", health}} {
		plain := &http.Server{Addr: os.Getenv(p.env), Handler: p.handler, ReadHeaderTimeout: time.Second}
		go func() {
			err := plain.ListenAndServe()
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}()
	}
	<-term
	drain, _ := time.ParseDuration(os.Getenv("FAKE_DRAIN"))
	time.Sleep(drain)
	code, _ := strconv.Atoi(os.Getenv("FAKE_EXIT"))
	os.Exit(code)
}

// fakeCluster is a Cluster with just a state directory and, as its webhook serving
// certificate, net/http/httptest's self-signed one for 127.0.0.1: enough for Serve.
func fakeCluster(t *testing.T) *Cluster {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	srv.StartTLS()
	srv.Close()
	cert := srv.TLS.Certificates[0]
	keyDER, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Dir: t.TempDir(), CAs: x509.NewCertPool()}
	c.CAs.AddCert(srv.Certificate())
	if err := os.MkdirAll(filepath.Join(c.Dir, "pki"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.PKI("webhook.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.PKI("webhook.key"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return c
}

// freePort returns a port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startFake starts the fake `serve` with the given settings and stops it when the
// test ends.
func startFake(t *testing.T, c *Cluster, name string, env ...string) *Serve {
	t.Helper()
	s := c.NewServe(os.Args[0], name, freePort(t), append([]string{"HARNESS_FAKE_SERVE=1"}, env...)...)
	// Ephemeral ports plus the offsets could pass 65535.
	s.MetricsPort, s.HealthPort = freePort(t), freePort(t)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Kill() })
	return s
}

func TestServeStartRecordsPIDAndServes(t *testing.T) {
	c := fakeCluster(t)
	s := startFake(t, c, "webhook-test")
	if !s.Running() || s.PID() == 0 {
		t.Fatalf("running %v, pid %d after Start", s.Running(), s.PID())
	}
	b, err := os.ReadFile(filepath.Join(c.Dir, "pids", "webhook-test.pid"))
	if err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(s.PID()) {
		t.Errorf("pid file %q (%v), want %d", b, err, s.PID())
	}
	if err := s.Start(context.Background()); err == nil {
		t.Errorf("a second Start of a running process succeeded")
	}
	ms, err := s.Metrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := ms.Sum("fake_pid", nil); got != float64(s.PID()) {
		t.Errorf("scraped fake_pid %v, want %d", got, s.PID())
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if s.Running() || s.PID() != 0 {
		t.Errorf("running %v, pid %d after Kill", s.Running(), s.PID())
	}
	// A killed process starts again (a restart, as after a crash).
	if err := s.Start(context.Background()); err != nil {
		t.Fatalf("restart: %v", err)
	}
}

func TestServeTerminate(t *testing.T) {
	c := fakeCluster(t)
	t.Run("drains and exits", func(t *testing.T) {
		s := startFake(t, c, "webhook-drain", "FAKE_DRAIN=300ms")
		start := time.Now()
		state, err := s.Terminate(10 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if !state.Success() {
			t.Errorf("exited with %v, want status 0", state)
		}
		if took := time.Since(start); took < 300*time.Millisecond {
			t.Errorf("Terminate returned after %v, before the drain", took)
		}
		if s.Running() {
			t.Errorf("still running after Terminate")
		}
	})
	t.Run("exit status", func(t *testing.T) {
		s := startFake(t, c, "webhook-status", "FAKE_EXIT=4")
		state, err := s.Terminate(10 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if state.ExitCode() != 4 {
			t.Errorf("exited with %v, want status 4", state)
		}
	})
	t.Run("killed after the grace period", func(t *testing.T) {
		s := startFake(t, c, "webhook-stuck", "FAKE_DRAIN=1h")
		if _, err := s.Terminate(200 * time.Millisecond); !errors.Is(err, ErrNotExited) {
			t.Errorf("Terminate = %v, want ErrNotExited", err)
		}
		if s.Running() {
			t.Errorf("still running after Terminate")
		}
	})
	t.Run("stop ignores how it exited", func(t *testing.T) {
		s := startFake(t, c, "webhook-stop", "FAKE_EXIT=1")
		if err := s.Stop(); err != nil {
			t.Errorf("Stop = %v", err)
		}
		if err := s.Stop(); err != nil {
			t.Errorf("Stop of a stopped process = %v", err)
		}
	})
}
