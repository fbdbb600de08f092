package peerauth

import (
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/testcert"
)

// certSource serves one fixed certificate, issued for the test.
func certSource(t *testing.T, serial int64) CertificateSource {
	t.Helper()
	certPEM, keyPEM := testcert.SelfSigned(t, serial)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &cert, nil }
}

// testCA signs serving certificates as the webhook's CA does (cert-manager's CA issuer,
// CERT_MODE=self).
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	der, key := testcert.Create(t, &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "webhook-test-ca"},
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}, nil, nil)
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// leaf issues a serving certificate for dnsNames (and 127.0.0.1).
func (ca *testCA) leaf(t *testing.T, serial int64, dnsNames ...string) CertificateSource {
	t.Helper()
	der, key := testcert.Create(t, &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "webhook"},
		DNSNames: dnsNames, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, ca.cert, ca.key)
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	return func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &cert, nil }
}

// servePeer serves a peer endpoint answering 200 to the clients trust accepts, and
// returns its URL.
func servePeer(t *testing.T, trust Trust) string {
	t.Helper()
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	// As the webhook serves peers: client certificates requested, checked by the handler.
	srv := httptest.NewUnstartedServer(Require(trust, ok))
	cert, err := trust.Own(nil)
	if err != nil {
		t.Fatal(err)
	}
	// Certificates, not GetCertificate: httptest would put its own certificate first.
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{*cert}, ClientAuth: tls.RequestClientCert, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL
}

func postPeer(c *http.Client, url string) (int, error) {
	defer c.CloseIdleConnections()
	resp, err := c.Post(url, "application/json", strings.NewReader("{}"))
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// Without the webhook's CA, seat claims pass only between replicas serving the same
// certificate: a client with another certificate, or none, is refused, and a server
// with another one is not trusted.
func TestPeerCertificatePinnedBothWays(t *testing.T) {
	own, other := certSource(t, 1), certSource(t, 2)
	url := servePeer(t, Trust{Own: own})

	if code, err := postPeer(NewClient(Trust{Own: own}), url); err != nil || code != http.StatusOK {
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
		if code, err := postPeer(c, url); err != nil || code != http.StatusForbidden {
			t.Errorf("a client with %s: %d, %v; want 403", name, code, err)
		}
	}
	// A server with another certificate is no replica: the handshake fails.
	if _, err := postPeer(NewClient(Trust{Own: own}), servePeer(t, Trust{Own: other})); err == nil || !strings.Contains(err.Error(), "serving certificate") {
		t.Errorf("a server with another certificate: %v; want the pin to refuse it", err)
	}
}

// The certificate is rotated on one replica only: with the webhook's CA beside the
// certificate, the old and the new leaf accept each other both ways, so no forwarded
// claim is refused. A leaf of another CA, or of this CA for other names, is refused.
func TestPeerRotatedOnOneReplicaIsTrusted(t *testing.T) {
	ca := newTestCA(t)
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, ca.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	const svc = "custom-kube-scheduler-webhook.custom-kube-scheduler-webhook.svc"
	before, rotated := ca.leaf(t, 10, svc), ca.leaf(t, 11, svc)
	trust := func(own CertificateSource) Trust { return Trust{Own: own, CAFile: caFile} }

	for name, pair := range map[string][2]CertificateSource{
		"rotated client, old server": {rotated, before},
		"old client, rotated server": {before, rotated},
	} {
		url := servePeer(t, trust(pair[1]))
		if code, err := postPeer(NewClient(trust(pair[0])), url); err != nil || code != http.StatusOK {
			t.Errorf("%s: %d, %v; want 200", name, code, err)
		}
	}
	url := servePeer(t, trust(before))
	strangers := map[string]CertificateSource{
		"another CA's leaf":               newTestCA(t).leaf(t, 12, svc),
		"this CA's leaf for another name": ca.leaf(t, 13, "other.default.svc"),
	}
	for name, cert := range strangers {
		// The stranger as a client: refused by the server (403).
		c := NewClient(Trust{Own: cert, CAFile: caFile})
		c.Transport.(*http.Transport).TLSClientConfig.VerifyPeerCertificate = nil // it trusts the server
		if code, err := postPeer(c, url); err != nil || code != http.StatusForbidden {
			t.Errorf("%s as a client: %d, %v; want 403", name, code, err)
		}
		// The stranger as a server: the replica's handshake refuses it.
		if _, err := postPeer(NewClient(trust(before)), servePeer(t, Trust{Own: cert})); err == nil {
			t.Errorf("%s as a server: trusted", name)
		}
	}
}
