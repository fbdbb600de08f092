package ledger

import (
	"context"
	"fmt"
	"os"

	"github.com/sirupsen/logrus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// CheckReplicas refuses several replicas whose trust has no CA (no file at CAFile):
// replicas then trust only the very leaf they serve, so while a renewed certificate
// reaches the replicas one after another every claim forwarded between an old and a new
// one fails. The count is spec.replicas of the Deployment deployment in namespace (the
// webhook's own, OWNER_DEPLOYMENT); without one, a warning.
func (p PeerTrust) CheckReplicas(ctx context.Context, client kubernetes.Interface, namespace, deployment string, log logrus.FieldLogger) error {
	if _, err := os.Stat(p.CAFile); err == nil {
		return nil
	}
	if deployment == "" {
		log.Warnf("no CA certificate at %s: run one replica only (several pin one another's serving certificate, and forwarded seat claims fail during a rotation)", p.CAFile)
		return nil
	}
	d, err := client.AppsV1().Deployments(namespace).Get(ctx, deployment, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading the replicas of Deployment %s/%s (OWNER_DEPLOYMENT) to check the CA certificate: %w", namespace, deployment, err)
	}
	if replicas := ptr.Deref(d.Spec.Replicas, 1); replicas > 1 {
		return fmt.Errorf("CERT_MODE=file with %d replicas needs the CA certificate at %s (ca.crt beside TLS_CERT_FILE, as cert-manager writes it): "+
			"without it replicas trust only the leaf certificate they serve, and seat claims forwarded between replicas fail while a renewed certificate spreads; "+
			"add ca.crt to the certificate Secret, use certMode self or cert-manager, or run one replica", replicas, p.CAFile)
	}
	return nil
}
