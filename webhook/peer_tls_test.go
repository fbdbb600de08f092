package webhook

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// certSource serves one fixed certificate, issued for the test.
func certSource(t *testing.T, serial int64) CertificateSource {
	t.Helper()
	certPEM, keyPEM := issueCert(t, serial)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &cert, nil }
}

// Seat claims pass only between replicas serving the same certificate: a client with
// another certificate, or none, is refused, and a server with another one is not
// trusted.
func TestPeerCertificatePinnedBothWays(t *testing.T) {
	own, other := certSource(t, 1), certSource(t, 2)
	serveWith := func(cert CertificateSource) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { writePeer(w, http.StatusOK, peerResponse{Seat: 7}) })
		go func() { done <- Serve(ctx, ln, RequirePeerCertificate(cert, ok), cert, quietLog()) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Serve: %v", err)
			}
		})
		return "https://" + ln.Addr().String() + PeerClaimPath
	}
	post := func(c *http.Client, url string) (int, error) {
		defer c.CloseIdleConnections()
		resp, err := c.Post(url, "application/json", strings.NewReader("{}"))
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	url := serveWith(own)

	if code, err := post(NewPeerClient(own), url); err != nil || code != http.StatusOK {
		t.Fatalf("a replica with the same certificate: %d, %v; want 200", code, err)
	}
	// A client trusting the server but presenting another certificate, or none.
	insecure := func(client CertificateSource) *http.Client {
		cfg := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12} //nolint:gosec // the test's stranger
		if client != nil {
			cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return client(nil) }
		}
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	}
	for name, c := range map[string]*http.Client{"another certificate": insecure(other), "no certificate": insecure(nil)} {
		if code, err := post(c, url); err != nil || code != http.StatusForbidden {
			t.Errorf("a client with %s: %d, %v; want 403", name, code, err)
		}
	}
	// A server with another certificate is no replica: the handshake fails.
	if _, err := post(NewPeerClient(own), serveWith(other)); err == nil || !strings.Contains(err.Error(), "serving certificate") {
		t.Errorf("a server with another certificate: %v; want the pin to refuse it", err)
	}
}
