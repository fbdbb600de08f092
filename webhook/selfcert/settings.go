package selfcert

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/rest"
)

// Settings are the serving certificate's knobs a user turns (TLS_CERT_FILE,
// TLS_KEY_FILE, CERT_MODE and, with CERT_MODE=self, CERT_SECRET_NAME, SERVICE_NAME),
// the webhook configurations it is trusted through and the admission token rotated
// with it is written into (MUTATING_WEBHOOK_CONFIGURATION,
// VALIDATING_WEBHOOK_CONFIGURATION), and the token's Secret (ADMISSION_TOKEN_SECRET):
// serve reads them and hands them to Await, the certificate watcher and the token's
// Keeper.
type Settings struct {
	// Self bootstraps and rotates the certificate in SecretName (CERT_MODE=self).
	Self                    bool
	CertFile, KeyFile       string
	SecretName, ServiceName string
	MutatingConfig          string
	ValidatingConfig        string
	// TokenSecret holds the admission token ("": no token, open paths).
	TokenSecret string
}

// Await runs the self-managed mode when the settings ask for it (Self): it bootstraps
// (or loads) the CA and serving certificate kept in SecretName, writes them to
// CertFile and KeyFile, keeps the webhook configurations' caBundle current and rotates
// (Start), and returns once the files exist; CertFile and KeyFile share a directory
// (serve's settings check it). Without Self the files are provided: it returns at once.
func (s Settings) Await(ctx context.Context, namespace string, restCfg *rest.Config, log logrus.FieldLogger) error {
	if !s.Self {
		return nil
	}
	ready, err := Start(ctx, Config{
		Namespace: namespace, SecretName: s.SecretName, ServiceName: s.ServiceName,
		CertDir: filepath.Dir(s.CertFile), CertName: filepath.Base(s.CertFile), KeyName: filepath.Base(s.KeyFile),
		MutatingWebhookName: s.MutatingConfig, ValidatingWebhookName: s.ValidatingConfig,
	}, restCfg, log)
	if err != nil {
		return fmt.Errorf("self-managed certificates: %w", err)
	}
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for self-managed certificates: %w", ctx.Err())
	}
}
