package webhook

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/testcert"
)

// The gauge shows the NotAfter of the certificate served now, and 0 when there is none.
func TestCertificateExpiry(t *testing.T) {
	certPEM, keyPEM := testcert.SelfSigned(t, 1)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	cert.Leaf = nil // as a loader that does not fill it in
	var serving *tls.Certificate
	reg := prometheus.NewRegistry()
	if err := RegisterCertificateExpiry(reg, func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		if serving == nil {
			return nil, errors.New("no certificate")
		}
		return serving, nil
	}); err != nil {
		t.Fatal(err)
	}
	value := func() float64 {
		mfs, err := reg.Gather()
		if err != nil || len(mfs) != 1 {
			t.Fatalf("gather: %v, %d families", err, len(mfs))
		}
		return mfs[0].GetMetric()[0].GetGauge().GetValue()
	}
	if v := value(); v != 0 {
		t.Errorf("without a certificate: %v, want 0", v)
	}
	serving = &cert
	if v := value(); v != float64(leaf.NotAfter.Unix()) {
		t.Errorf("expiry %v, want %v", v, leaf.NotAfter.Unix())
	}
	if n, err := testutil.GatherAndCount(reg, MetricsNamespace+"_certificate_expiry_timestamp_seconds"); err != nil || n != 1 {
		t.Errorf("series %d (%v), want 1", n, err)
	}
}
