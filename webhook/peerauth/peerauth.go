package peerauth

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"time"
)

// CertificateSource returns the certificate this replica serves now
// (certwatcher.CertWatcher.GetCertificate).
type CertificateSource func(*tls.ClientHelloInfo) (*tls.Certificate, error)

// Trust accepts another replica's certificate: this replica's own serving
// certificate, or one the webhook's CA signed for the same names (so replicas holding
// different leaves during a rotation accept each other).
type Trust struct {
	// Own returns the certificate this replica serves now.
	Own CertificateSource
	// CAFile is the signing CA's PEM (ca.crt beside tls.crt), read at each check.
	// Empty or missing: a peer must present this replica's own certificate.
	CAFile string
}

// verify accepts chain (leaf first, DER) as another replica's.
func (p Trust) verify(chain [][]byte) error {
	if len(chain) == 0 {
		return errors.New("the peer presented no certificate")
	}
	own, err := p.Own(nil)
	if err != nil || own == nil || len(own.Certificate) == 0 {
		return fmt.Errorf("no serving certificate to compare the peer's with: %v", err)
	}
	if bytes.Equal(chain[0], own.Certificate[0]) {
		return nil
	}
	roots, err := p.roots()
	if err != nil {
		return err
	}
	if roots == nil {
		return errors.New("the peer does not hold this webhook's serving certificate (and no CA file to check it against)")
	}
	ownLeaf, err := x509.ParseCertificate(own.Certificate[0])
	if err != nil {
		return fmt.Errorf("parse this replica's serving certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(chain[0])
	if err != nil {
		return fmt.Errorf("parse the peer's certificate: %w", err)
	}
	intermediates := x509.NewCertPool()
	for _, der := range chain[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			intermediates.AddCert(c)
		}
	}
	opts := x509.VerifyOptions{Roots: roots, Intermediates: intermediates, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}
	if _, err := leaf.Verify(opts); err != nil {
		return fmt.Errorf("the peer's certificate is not signed by the webhook's CA: %w", err)
	}
	if !sameNames(leaf, ownLeaf) {
		return fmt.Errorf("the peer's certificate is for %v %v, this webhook's for %v %v", leaf.DNSNames, leaf.IPAddresses, ownLeaf.DNSNames, ownLeaf.IPAddresses)
	}
	return nil
}

// roots reads the CA file (nil, nil: none configured or there).
func (p Trust) roots() (*x509.CertPool, error) {
	if p.CAFile == "" {
		return nil, nil
	}
	pemBytes, err := os.ReadFile(p.CAFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the webhook's CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		return nil, fmt.Errorf("the webhook's CA file %s holds no PEM certificate", p.CAFile)
	}
	return pool, nil
}

// sameNames reports whether two certificates name the same DNS names and IP addresses.
func sameNames(a, b *x509.Certificate) bool {
	ips := func(c *x509.Certificate) []string {
		out := make([]string, len(c.IPAddresses))
		for i, ip := range c.IPAddresses {
			out[i] = ip.String()
		}
		slices.Sort(out)
		return out
	}
	dns := func(c *x509.Certificate) []string { return slices.Sorted(slices.Values(c.DNSNames)) }
	return slices.Equal(dns(a), dns(b)) && slices.Equal(ips(a), ips(b))
}

// NewClient returns the HTTPS client calling other replicas: it accepts only a server
// trust accepts, and presents this replica's serving certificate.
func NewClient(trust Trust) *http.Client {
	transport := &http.Transport{
		TLSClientConfig: &tls.Config{
			MinVersion: tls.VersionTLS12,
			// No host name to verify: VerifyPeerCertificate checks the chain.
			InsecureSkipVerify:    true, //nolint:gosec // verified in VerifyPeerCertificate
			VerifyPeerCertificate: func(chain [][]byte, _ [][]*x509.Certificate) error { return trust.verify(chain) },
			GetClientCertificate:  func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return trust.Own(nil) },
		},
		// A burst's claims share one HTTP/2 connection, not a handshake each.
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
	}
	return &http.Client{Transport: transport, Timeout: 3 * time.Second}
}

// Require serves next only to clients presenting a certificate trust accepts (403
// otherwise, with a JSON {"error": ...} as the seat ledger's peer answers carry); the
// server must request client certificates.
func Require(trust Trust, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
			forbid(w, "a webhook replica's client certificate is required")
			return
		}
		chain := make([][]byte, len(r.TLS.PeerCertificates))
		for i, c := range r.TLS.PeerCertificates {
			chain[i] = c.Raw
		}
		if err := trust.verify(chain); err != nil {
			forbid(w, err.Error())
			return
		}
		next.ServeHTTP(w, r)
	})
}

func forbid(w http.ResponseWriter, reason string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusForbidden)
	_ = json.NewEncoder(w).Encode(struct {
		Error string `json:"error"`
	}{reason})
}
