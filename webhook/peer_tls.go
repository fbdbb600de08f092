package webhook

// The replicas reach one another over HTTPS by pod IP. They all serve one certificate
// (one Secret), so each side authenticates the other by that certificate: no CA bundle
// or service name is needed, and nothing but a replica can claim or release seats.

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// CertificateSource returns the certificate this replica serves now
// (certwatcher.CertWatcher.GetCertificate).
type CertificateSource func(*tls.ClientHelloInfo) (*tls.Certificate, error)

// sameCertificate reports whether leaf (DER) is the certificate own serves now.
func sameCertificate(own CertificateSource, leaf []byte) error {
	cert, err := own(nil)
	if err != nil || cert == nil || len(cert.Certificate) == 0 {
		return fmt.Errorf("no serving certificate to compare the peer's with: %v", err)
	}
	if !bytes.Equal(leaf, cert.Certificate[0]) {
		return errors.New("the peer does not hold this webhook's serving certificate")
	}
	return nil
}

// NewPeerClient returns the HTTPS client forwarding seat claims to the replica owning a
// revision: it accepts only a server presenting this replica's serving certificate,
// and presents that certificate itself.
func NewPeerClient(own CertificateSource) *http.Client {
	transport := &http.Transport{
		TLSClientConfig: &tls.Config{
			MinVersion: tls.VersionTLS12,
			// The chain is not verified against a CA: VerifyConnection pins the leaf.
			InsecureSkipVerify: true, //nolint:gosec // pinned in VerifyConnection
			VerifyConnection: func(cs tls.ConnectionState) error {
				if len(cs.PeerCertificates) == 0 {
					return errors.New("the peer presented no certificate")
				}
				return sameCertificate(own, cs.PeerCertificates[0].Raw)
			},
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return own(nil) },
		},
		// A burst forwards hundreds of claims at once to one owner: over HTTP/2 they
		// share one connection instead of a TLS handshake each.
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
	}
	return &http.Client{Transport: transport, Timeout: 3 * time.Second}
}

// RequirePeerCertificate serves next only to clients presenting this replica's serving
// certificate (403 otherwise). The server must request client certificates
// (ServeDrain does).
func RequirePeerCertificate(own CertificateSource, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
			writePeer(w, http.StatusForbidden, peerResponse{Error: "a webhook replica's client certificate is required"})
			return
		}
		if err := sameCertificate(own, r.TLS.PeerCertificates[0].Raw); err != nil {
			writePeer(w, http.StatusForbidden, peerResponse{Error: err.Error()})
			return
		}
		next.ServeHTTP(w, r)
	})
}
