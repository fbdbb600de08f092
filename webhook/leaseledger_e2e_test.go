//go:build e2e

package webhook

import (
	"context"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Two webhook replicas, one real kube-apiserver, 200 concurrent claims for one
// ReplicaSet: seats 1..200, each once. The time is reported, not asserted.
func TestLeaseLedgerAcrossReplicasOnAPIServer(t *testing.T) {
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		t.Fatalf("KUBECONFIG must point at a running cluster: %v", err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ns, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "ledger-e2e-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{}) })

	held := &heldMap{seats: map[types.UID]map[int]bool{}}
	for _, n := range []int{1, 2, 3} {
		ledgers := replicasIn(t, client, ns.Name, held, n)
		revision := types.UID("e2e-revision-" + string(rune('0'+n)))
		start := time.Now()
		burst(t, ledgers, revision, 200)
		t.Logf("%d replica(s): 200 concurrent claims, seats exactly 1..200, in %s", n, time.Since(start).Round(time.Millisecond))
		leases, err := client.CoordinationV1().Leases(ns.Name).List(ctx, metav1.ListOptions{LabelSelector: labelRevision + "=" + string(revision)})
		if err != nil {
			t.Fatal(err)
		}
		if len(leases.Items) != 200 {
			t.Fatalf("%d seat leases in the API server, want 200", len(leases.Items))
		}
	}
}
