package main

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
// that names the file and the ways out; one replica, a CA, or CERT_MODE=self run.
func TestSeveralReplicasWithoutACAAreRefused(t *testing.T) {
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.crt")
	log := logrus.New()
	log.SetOutput(io.Discard)
	deploy := func(replicas int32) *fake.Clientset {
		return fake.NewClientset(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "hook", Namespace: "ns"}, Spec: appsv1.DeploymentSpec{Replicas: ptr.To(replicas)}})
	}
	cfg := &serveConfig{Namespace: "ns", OwnerDeployment: "hook"}
	ctx := context.Background()
	err := checkPeerCA(ctx, cfg, deploy(2), caFile, log)
	if err == nil || !strings.Contains(err.Error(), caFile) || !strings.Contains(err.Error(), "2 replicas") || !strings.Contains(err.Error(), "one replica") {
		t.Fatalf("2 replicas without ca.crt: %v, want a refusal naming the file and the ways out", err)
	}
	if err := checkPeerCA(ctx, cfg, deploy(1), caFile, log); err != nil {
		t.Fatalf("1 replica without ca.crt: %v", err)
	}
	if err := checkPeerCA(ctx, &serveConfig{Namespace: "ns", OwnerDeployment: "hook", SelfCert: true}, deploy(3), caFile, log); err != nil {
		t.Fatalf("CERT_MODE=self: %v", err)
	}
	if err := os.WriteFile(caFile, []byte("ca"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := checkPeerCA(ctx, cfg, deploy(3), caFile, log); err != nil {
		t.Fatalf("3 replicas with ca.crt: %v", err)
	}
	if err := checkPeerCA(ctx, cfg, fake.NewClientset(), filepath.Join(dir, "none"), log); err == nil || !strings.Contains(err.Error(), "OWNER_DEPLOYMENT") {
		t.Fatalf("owner Deployment missing: %v", err)
	}
}
