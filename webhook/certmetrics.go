package webhook

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// RegisterCertificateExpiry registers
// custom_kube_scheduler_webhook_certificate_expiry_timestamp_seconds on reg: when the
// serving certificate that get returns now (the one handshakes present, reloaded on
// rotation) expires, in Unix seconds; 0 while none can be read.
func RegisterCertificateExpiry(reg prometheus.Registerer, get func(*tls.ClientHelloInfo) (*tls.Certificate, error)) error {
	g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: MetricsNamespace, Name: "certificate_expiry_timestamp_seconds",
		Help: "When the serving certificate in use expires (Unix time; 0 while none can be read).",
	}, func() float64 {
		cert, err := get(nil)
		if err != nil || cert == nil || len(cert.Certificate) == 0 {
			return 0
		}
		leaf := cert.Leaf
		if leaf == nil {
			if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
				return 0
			}
		}
		return float64(leaf.NotAfter.Unix())
	})
	if err := reg.Register(g); err != nil {
		return fmt.Errorf("register certificate expiry: %w", err)
	}
	return nil
}
