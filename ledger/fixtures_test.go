package ledger

import (
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

const (
	// ledgerNS is where the seat records are kept (the webhook's namespace).
	ledgerNS = "custom-kube-scheduler-webhook"
	// testNS is the namespace of the workloads whose seats are claimed.
	testNS = "shop"
)

func quietLog() logrus.FieldLogger {
	l, _ := logtest.NewNullLogger()
	return l
}

func controllerRef(kind, name string, uid types.UID) metav1.OwnerReference {
	yes := true
	return metav1.OwnerReference{APIVersion: "apps/v1", Kind: kind, Name: name, UID: uid, Controller: &yes}
}
