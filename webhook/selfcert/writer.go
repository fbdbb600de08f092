package selfcert

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
)

// caCertName is the CA certificate's key in the Secret and its file name in CertDir.
const caCertName = "ca.crt"

// fileWriter mirrors the Secret's serving certificate and key, and its CA certificate,
// into CertDir.
type fileWriter struct {
	clientset kubernetes.Interface
	cfg       Config
	log       logrus.FieldLogger
}

// run watches the one Secret until ctx is done.
func (w *fileWriter) run(ctx context.Context) error {
	factory := informers.NewSharedInformerFactoryWithOptions(w.clientset, 0,
		informers.WithNamespace(w.cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", w.cfg.SecretName).String()
		}))
	inf := factory.Core().V1().Secrets().Informer()
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.sync(obj) },
		UpdateFunc: func(_, obj any) { w.sync(obj) },
		DeleteFunc: func(any) {
			// The rotator only updates; put an empty Secret back so it can refill it.
			w.log.Warn("certificate secret deleted; recreating it")
			if err := ensureSecret(ctx, w.clientset, w.cfg); err != nil {
				w.log.WithError(err).Error("recreating certificate secret")
			}
		},
	}); err != nil {
		return fmt.Errorf("selfcert: watching secret: %w", err)
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	<-ctx.Done()
	factory.Shutdown()
	return nil
}

func (w *fileWriter) sync(obj any) {
	s, ok := obj.(*corev1.Secret)
	if !ok {
		return
	}
	cert, key := s.Data[w.cfg.CertName], s.Data[w.cfg.KeyName]
	if len(cert) == 0 || len(key) == 0 {
		return // not bootstrapped yet
	}
	if _, err := tls.X509KeyPair(cert, key); err != nil {
		w.log.WithError(err).Warn("certificate secret holds no valid key pair; files left as they are")
		return
	}
	// The CA first: replicas accept one another's certificates by it (ledger peers), and
	// a certificate it did not sign must not be on disk before it.
	if ca := s.Data[caCertName]; len(ca) > 0 {
		caPath := filepath.Join(w.cfg.CertDir, caCertName)
		if old, _ := os.ReadFile(caPath); !bytes.Equal(old, ca) {
			if err := writeAtomic(caPath, ca); err != nil {
				w.log.WithError(err).Error("writing the CA certificate file")
				return
			}
		}
	}
	changed, err := writeKeyPair(w.cfg, cert, key)
	if err != nil {
		w.log.WithError(err).Error("writing certificate files")
		return
	}
	if changed {
		w.log.WithField("dir", w.cfg.CertDir).Info("serving certificate files updated")
	}
}

// writeKeyPair replaces the key file, then the certificate file, each atomically by
// rename. A reloader that watches the certificate finds the matching key already there.
func writeKeyPair(cfg Config, cert, key []byte) (bool, error) {
	certPath, keyPath := cfg.certFiles()
	oldCert, _ := os.ReadFile(certPath)
	oldKey, _ := os.ReadFile(keyPath)
	if bytes.Equal(oldCert, cert) && bytes.Equal(oldKey, key) {
		return false, nil
	}
	if err := writeAtomic(keyPath, key); err != nil {
		return false, err
	}
	if err := writeAtomic(certPath, cert); err != nil {
		return false, err
	}
	return true, nil
}

func writeAtomic(path string, data []byte) error {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+"."+randomSuffix())
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("replacing %s: %w", path, err)
	}
	return nil
}

func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b)
}
