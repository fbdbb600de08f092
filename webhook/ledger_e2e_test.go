//go:build e2e

package webhook

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// countingTransport counts the requests that write Leases (POST, PUT, DELETE), and
// those the API server refused with a Conflict.
type countingTransport struct {
	next             http.RoundTripper
	writes, conflict atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(r)
	if r.Method != http.MethodGet && strings.Contains(r.URL.Path, "/leases") {
		c.writes.Add(1)
		if err == nil && resp.StatusCode == http.StatusConflict {
			c.conflict.Add(1)
		}
	}
	return resp, err
}

// 1, 2 and 3 ledger instances (webhook replicas) on one real kube-apiserver, 200 and
// 500 concurrent claims for one ReplicaSet: seats exactly 1..n each time. Reports the
// record writes per claim (the budget is 0.1) and the time.
func TestSeatLedgerAcrossReplicasOnAPIServer(t *testing.T) {
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		t.Fatalf("KUBECONFIG must point at a running cluster: %v", err)
	}
	cfg.QPS = -1
	counter := &countingTransport{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { counter.next = rt; return counter })
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

	lingers := []time.Duration{DefaultLinger}
	if v := os.Getenv("LEDGER_LINGERS"); v != "" { // tuning: e.g. LEDGER_LINGERS=0s,1ms,2ms,5ms
		lingers = nil
		for _, s := range strings.Split(v, ",") {
			d, err := time.ParseDuration(s)
			if err != nil {
				t.Fatal(err)
			}
			lingers = append(lingers, d)
		}
	}
	for _, linger := range lingers {
		for _, claims := range []int{200, 500} {
			for _, n := range []int{1, 2, 3} {
				ls := ledgers(t, client, ns.Name, n, LedgerOptions{Linger: max(linger, time.Nanosecond)})
				revision := Revision{Namespace: ns.Name, UID: types.UID("e2e-" + uuidish(linger, claims, n))}
				w0, c0 := counter.writes.Load(), counter.conflict.Load()
				start := time.Now()
				burst(t, ls, revision, claims)
				elapsed := time.Since(start)
				writes, conflicts := counter.writes.Load()-w0, counter.conflict.Load()-c0
				t.Logf("linger %s, %d replica(s), %d claims: seats exactly 1..%d in %s; %d record writes (%d conflicts): %.3f writes per pod",
					linger, n, claims, claims, elapsed.Round(time.Millisecond), writes, conflicts, float64(writes)/float64(claims))
				if linger == DefaultLinger && float64(writes)/float64(claims) > 0.1 {
					t.Errorf("%.3f record writes per pod, budget 0.1", float64(writes)/float64(claims))
				}
				leases, err := client.CoordinationV1().Leases(ns.Name).List(ctx, metav1.ListOptions{})
				if err != nil {
					t.Fatal(err)
				}
				for _, l := range leases.Items {
					if l.Labels[strategy.LabelRevision] == string(revision.UID) && len(decodeReservations(l.Annotations[strategy.AnnotationReservations])) != claims {
						t.Fatalf("the record holds %d reservations, want %d", len(decodeReservations(l.Annotations[strategy.AnnotationReservations])), claims)
					}
				}
			}
		}
	}
	// One record per revision, not one object per pod.
	leases, err := client.CoordinationV1().Leases(ns.Name).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := len(lingers) * 2 * 3; len(leases.Items) != want {
		t.Fatalf("%d records, want %d (one per revision)", len(leases.Items), want)
	}
}

func uuidish(linger time.Duration, claims, n int) string {
	return strings.ReplaceAll(fmt.Sprintf("%s-%d-%d", linger, claims, n), ".", "-")
}
