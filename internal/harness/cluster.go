package harness

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Cluster is a local cluster started by scripts/localcluster/up.sh, found by its
// state directory.
type Cluster struct {
	// Dir is the state directory (kubeconfig, pki/, logs/, pids/, port-offset).
	Dir string
	// PortOffset is the cluster's port offset; the webhook's base port is 9443 + PortOffset.
	PortOffset int
	// Config is the admin client configuration (no client-side rate limit).
	Config *rest.Config
	// Client is a clientset of Config.
	Client kubernetes.Interface
	// CAs trusts the cluster CA, which also signs the webhook's serving certificate.
	CAs *x509.CertPool
	// ServingCert is the webhook serving certificate for 127.0.0.1 (pki/webhook.crt).
	ServingCert tls.Certificate
}

// OpenCluster reads the state of the local cluster in dir.
func OpenCluster(dir string) (*Cluster, error) {
	c := &Cluster{Dir: dir}
	kubeconfig := c.Kubeconfig()
	if _, err := os.Stat(kubeconfig); err != nil {
		return nil, fmt.Errorf("no local cluster in %s (scripts/localcluster/up.sh): %w", dir, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "port-offset")); err == nil {
		if c.PortOffset, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
			return nil, fmt.Errorf("reading port offset of %s: %w", dir, err)
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", kubeconfig, err)
	}
	// The harness measures the cluster and the webhook, not client-go's rate limiter.
	cfg.QPS, cfg.Burst = 500, 1000
	c.Config = cfg
	if c.Client, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, fmt.Errorf("building client: %w", err)
	}
	pki := filepath.Join(dir, "pki")
	pem, err := os.ReadFile(filepath.Join(pki, "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("reading CA: %w", err)
	}
	c.CAs = x509.NewCertPool()
	if !c.CAs.AppendCertsFromPEM(pem) {
		return nil, errors.New("no certificate in " + filepath.Join(pki, "ca.crt"))
	}
	if c.ServingCert, err = tls.LoadX509KeyPair(filepath.Join(pki, "webhook.crt"), filepath.Join(pki, "webhook.key")); err != nil {
		return nil, fmt.Errorf("loading webhook serving certificate: %w", err)
	}
	return c, nil
}

// Kubeconfig is the admin kubeconfig's path.
func (c *Cluster) Kubeconfig() string { return filepath.Join(c.Dir, "kubeconfig") }

// PKI returns the path of a file in the cluster's pki/ directory.
func (c *Cluster) PKI(name string) string { return filepath.Join(c.Dir, "pki", name) }

// WebhookPort is the first port reserved for webhook processes of this cluster.
func (c *Cluster) WebhookPort() int { return 9443 + c.PortOffset }

// ClientTLS is a client TLS configuration that trusts the cluster CA.
func (c *Cluster) ClientTLS() *tls.Config {
	return &tls.Config{RootCAs: c.CAs, MinVersion: tls.VersionTLS12}
}

// HTTPClient is an HTTPS client that trusts the cluster CA, for the webhook's endpoints.
func (c *Cluster) HTTPClient(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{TLSClientConfig: c.ClientTLS(), MaxIdleConnsPerHost: 200}}
}

// StartProxy starts a round-robin proxy on port in front of the webhook processes
// listening on backends, serving the webhook certificate.
func (c *Cluster) StartProxy(port int, backends ...int) (*Proxy, error) {
	return StartProxy(port, c.ServingCert, c.ClientTLS(), backends...)
}
