package ledger

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

// Several replicas with certificate files but no ca.crt are refused with a message
// that names the file and the ways out; one replica, or a CA, run.
func TestSeveralReplicasWithoutACAAreRefused(t *testing.T) {
	dir := t.TempDir()
	trust := PeerTrust{CAFile: filepath.Join(dir, "ca.crt")}
	log := logrus.New()
	log.SetOutput(io.Discard)
	deploy := func(replicas int32) *fake.Clientset {
		return fake.NewClientset(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "hook", Namespace: "ns"}, Spec: appsv1.DeploymentSpec{Replicas: ptr.To(replicas)}})
	}
	ctx := context.Background()
	err := trust.CheckReplicas(ctx, deploy(2), "ns", "hook", log)
	if err == nil || !strings.Contains(err.Error(), trust.CAFile) || !strings.Contains(err.Error(), "2 replicas") || !strings.Contains(err.Error(), "one replica") {
		t.Fatalf("2 replicas without ca.crt: %v, want a refusal naming the file and the ways out", err)
	}
	if err := trust.CheckReplicas(ctx, deploy(1), "ns", "hook", log); err != nil {
		t.Fatalf("1 replica without ca.crt: %v", err)
	}
	if err := trust.CheckReplicas(ctx, deploy(3), "ns", "", log); err != nil {
		t.Fatalf("no owner Deployment: %v, want a warning only", err)
	}
	if err := os.WriteFile(trust.CAFile, []byte("ca"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := trust.CheckReplicas(ctx, deploy(3), "ns", "hook", log); err != nil {
		t.Fatalf("3 replicas with ca.crt: %v", err)
	}
	missing := PeerTrust{CAFile: filepath.Join(dir, "none")}
	if err := missing.CheckReplicas(ctx, fake.NewClientset(), "ns", "hook", log); err == nil || !strings.Contains(err.Error(), "OWNER_DEPLOYMENT") {
		t.Fatalf("owner Deployment missing: %v", err)
	}
}
