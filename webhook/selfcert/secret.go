package selfcert

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// ensureSecret creates the (empty) certificate Secret when it is missing: cert-controller
// only updates an existing Secret. The chart creates it, so the create is a fallback for
// plain installs and for a Secret deleted by hand.
func ensureSecret(ctx context.Context, cs kubernetes.Interface, cfg Config) error {
	secrets := cs.CoreV1().Secrets(cfg.Namespace)
	_, err := secrets.Get(ctx, cfg.SecretName, metav1.GetOptions{})
	if err == nil {
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("selfcert: reading secret %s/%s: %w", cfg.Namespace, cfg.SecretName, err)
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      cfg.SecretName,
			Namespace: cfg.Namespace,
			Labels:    map[string]string{"app.kubernetes.io/managed-by": FieldOwner},
		},
		Type: corev1.SecretTypeOpaque,
	}
	_, err = secrets.Create(ctx, s, metav1.CreateOptions{FieldManager: FieldOwner})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("selfcert: creating secret %s/%s: %w", cfg.Namespace, cfg.SecretName, err)
	}
	return nil
}
