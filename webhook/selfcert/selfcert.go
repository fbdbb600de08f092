// Package selfcert runs the webhook's self-managed certificate mode (CERT_MODE=self).
//
// It uses open-policy-agent/cert-controller to bootstrap a CA and a serving certificate
// into a Secret in the webhook's namespace, rotate them before they expire, and keep the
// caBundle of the webhook's MutatingWebhookConfiguration and ValidatingWebhookConfiguration
// current. Every replica writes the Secret's tls.crt/tls.key into its certificate
// directory (an emptyDir, not a Secret volume, so a rotation reaches the disk at once);
// the HTTPS server reloads the files by itself.
//
// The controller-runtime manager behind it is kept small: no metrics or health
// listeners, no leader election (replicas race on the Secret with optimistic concurrency
// and converge on the winner's CA), and every list/watch is narrowed to the one Secret
// and the two configurations by a metadata.name field selector, so RBAC can grant them by
// resourceNames.
//
// Its Settings are the serving certificate's settings as serve reads them, in either
// mode (the files, the Secret, the webhook configurations, the admission token's
// Secret); Settings.Await runs the self-managed mode when they ask for it.
package selfcert

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	"github.com/sirupsen/logrus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// Defaults used when the matching Config field is empty.
const (
	DefaultCertName = "tls.crt"
	DefaultKeyName  = "tls.key"
	// FieldOwner is the field manager recorded on the Secret and the webhook
	// configurations the rotator updates.
	FieldOwner = "custom-kube-scheduler-webhook"

	// restartBackoff bounds how fast a failed rotator is rebuilt.
	restartBackoffMin = 2 * time.Second
	restartBackoffMax = 2 * time.Minute
)

// Config says which Secret, Service and webhook configurations the rotator manages.
type Config struct {
	// Namespace of the webhook (POD_NAMESPACE); the Secret and the Service live here.
	Namespace string
	// SecretName is the Secret holding ca.crt, ca.key, tls.crt and tls.key.
	SecretName string
	// ServiceName is the Service in front of the webhook; the serving certificate is
	// issued for <service>.<namespace>.svc (and the longer and shorter forms).
	ServiceName string
	// CertDir receives CertName and KeyName; it must be writable.
	CertDir string
	// CertName and KeyName are the file names in CertDir and the keys in the Secret
	// (default tls.crt and tls.key).
	CertName, KeyName string
	// MutatingWebhookName and ValidatingWebhookName are the configurations whose
	// caBundle is kept current; empty skips one.
	MutatingWebhookName, ValidatingWebhookName string

	// CAName is the CA's common name (default "<service>-ca").
	CAName string
	// CAValidity, CertValidity, Lookahead and CheckInterval tune rotation; zero keeps
	// cert-controller's defaults (CA 10 years, serving cert 1 year, renewal 90 days
	// before expiry, checked every 12 hours).
	CAValidity, CertValidity, Lookahead, CheckInterval time.Duration
}

func (c *Config) defaults() {
	if c.CertName == "" {
		c.CertName = DefaultCertName
	}
	if c.KeyName == "" {
		c.KeyName = DefaultKeyName
	}
	if c.CAName == "" {
		c.CAName = c.ServiceName + "-ca"
	}
}

func (c *Config) validate() error {
	var missing []string
	for name, v := range map[string]string{
		"namespace": c.Namespace, "secret name": c.SecretName,
		"service name": c.ServiceName, "cert dir": c.CertDir,
	} {
		if v == "" {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("selfcert: missing %v", missing)
	}
	if c.CertValidity != 0 && c.Lookahead >= c.CertValidity {
		return fmt.Errorf("selfcert: lookahead %s must be shorter than cert validity %s", c.Lookahead, c.CertValidity)
	}
	return nil
}

// dnsNames returns the serving certificate's names: the first is the one the API server
// uses for a service reference.
func (c *Config) dnsNames() []string {
	svc := c.ServiceName + "." + c.Namespace
	return []string{svc + ".svc", svc + ".svc.cluster.local", svc, c.ServiceName}
}

// Start makes sure the Secret exists, then runs the rotator and the file writer until
// ctx is done. The returned channel is closed once the certificate files are in CertDir
// and the CA was injected into the webhook configurations; the server may start
// listening earlier but should report not-ready until then.
//
// cert-controller logs through controller-runtime's global logger, which the program
// sets (serve does, to its JSON log); log receives this package's own messages. A rotator that stops with an error is rebuilt with
// backoff, so a transient API outage does not end rotation for the life of the pod.
func Start(ctx context.Context, cfg Config, restCfg *rest.Config, log logrus.FieldLogger) (<-chan struct{}, error) {
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if restCfg == nil {
		return nil, errors.New("selfcert: nil rest config")
	}
	if err := os.MkdirAll(cfg.CertDir, 0o700); err != nil {
		return nil, fmt.Errorf("selfcert: creating cert dir: %w", err)
	}
	log = log.WithField("component", "selfcert")

	scoped := scopedConfig(restCfg, cfg)
	clientset, err := kubernetes.NewForConfig(scoped)
	if err != nil {
		return nil, fmt.Errorf("selfcert: building clientset: %w", err)
	}
	if err := ensureSecret(ctx, clientset, cfg); err != nil {
		return nil, err
	}

	ready := make(chan struct{})
	attempt, err := newAttempt(scoped, clientset, cfg, log)
	if err != nil {
		return nil, err
	}
	go run(ctx, attempt, scoped, clientset, cfg, log, ready)
	return ready, nil
}

// attempt is one manager with its rotator; a manager cannot be started twice.
type attempt struct {
	mgr     manager.Manager
	isReady chan struct{}
}

func newAttempt(scoped *rest.Config, clientset kubernetes.Interface, cfg Config, log logrus.FieldLogger) (*attempt, error) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("selfcert: building scheme: %w", err)
	}
	if err := admissionregistrationv1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("selfcert: building scheme: %w", err)
	}
	mgr, err := manager.New(scoped, manager.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		LeaderElection:         false,
	})
	if err != nil {
		return nil, fmt.Errorf("selfcert: creating manager: %w", err)
	}

	var webhooks []rotator.WebhookInfo
	if cfg.MutatingWebhookName != "" {
		webhooks = append(webhooks, rotator.WebhookInfo{Name: cfg.MutatingWebhookName, Type: rotator.Mutating})
	}
	if cfg.ValidatingWebhookName != "" {
		webhooks = append(webhooks, rotator.WebhookInfo{Name: cfg.ValidatingWebhookName, Type: rotator.Validating})
	}
	dns := cfg.dnsNames()
	cr := &rotator.CertRotator{
		SecretKey:      types.NamespacedName{Namespace: cfg.Namespace, Name: cfg.SecretName},
		CertDir:        cfg.CertDir,
		CertName:       cfg.CertName,
		KeyName:        cfg.KeyName,
		CAName:         cfg.CAName,
		CAOrganization: FieldOwner,
		DNSName:        dns[0],
		ExtraDNSNames:  dns[1:],
		IsReady:        make(chan struct{}),
		Webhooks:       webhooks,
		FieldOwner:     FieldOwner,
		// Exiting on refresh would restart every replica at each rotation; files are
		// rewritten and reloaded instead.
		RestartOnSecretRefresh: false,
		RequireLeaderElection:  false,
		EnableReadinessCheck:   true,
		CaCertDuration:         cfg.CAValidity,
		ServerCertDuration:     cfg.CertValidity,
		LookaheadInterval:      cfg.Lookahead,
		RotationCheckFrequency: cfg.CheckInterval,
		// controller-runtime rejects a second controller with the same name in one
		// process; a rebuilt attempt (or a test) registers a fresh one.
		ControllerName: "cert-rotator-" + randomSuffix(),
	}
	if err := rotator.AddRotator(mgr, cr); err != nil {
		return nil, fmt.Errorf("selfcert: adding cert rotator: %w", err)
	}
	w := &fileWriter{clientset: clientset, cfg: cfg, log: log}
	if err := mgr.Add(manager.RunnableFunc(w.run)); err != nil {
		return nil, fmt.Errorf("selfcert: adding cert file writer: %w", err)
	}
	return &attempt{mgr: mgr, isReady: cr.IsReady}, nil
}

// run starts attempts until ctx is done and closes ready after the first one is ready.
func run(ctx context.Context, a *attempt, scoped *rest.Config, clientset kubernetes.Interface, cfg Config, log logrus.FieldLogger, ready chan struct{}) {
	readyClosed := false
	backoff := restartBackoffMin
	for {
		done := make(chan error, 1)
		go func(m manager.Manager) { done <- m.Start(ctx) }(a.mgr)
		var err error
		select {
		case <-a.isReady:
			if !readyClosed {
				close(ready)
				readyClosed = true
			}
			log.Info("self-managed certificate ready and CA injected")
			err = <-done
		case err = <-done:
		}
		if ctx.Err() != nil {
			return
		}
		log.WithError(err).WithField("retry_in", backoff.String()).Error("certificate rotator stopped; rebuilding it")
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, restartBackoffMax)
		for {
			if err = ensureSecret(ctx, clientset, cfg); err == nil {
				if a, err = newAttempt(scoped, clientset, cfg, log); err == nil {
					break
				}
			}
			log.WithError(err).Error("rebuilding certificate rotator")
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
		}
	}
}

// certFiles returns the paths of the certificate and key files.
func (c *Config) certFiles() (cert, key string) {
	return filepath.Join(c.CertDir, c.CertName), filepath.Join(c.CertDir, c.KeyName)
}
