package validation

import (
	"io"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
)

const (
	testNS        = "shop"
	burstStrategy = "karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3"
)

func quietLog() logrus.FieldLogger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}

// fakeCapacity serves every term, or none, with the same tolerations.
type fakeCapacity struct {
	tolerations []corev1.Toleration
	served      bool
}

func (f fakeCapacity) Tolerations(map[string]string) ([]corev1.Toleration, bool) {
	return f.tolerations, f.served
}
