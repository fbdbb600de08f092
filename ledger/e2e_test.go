//go:build e2e

package ledger

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

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
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
// 500 concurrent claims for one ReplicaSet spread over them: seats exactly 1..n each
// time. Reports the record writes per claim (the budget is 0.1) and the time. Then the
// owner hands the revision over and the others go on from the seats it handed out.
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

	for _, claims := range []int{200, 500} {
		for _, n := range []int{1, 2, 3} {
			ls := ledgers(t, client, ns.Name, n, Config{})
			revision := clusterview.Revision{Namespace: ns.Name, UID: types.UID(fmt.Sprintf("e2e-%d-%d", claims, n))}
			w0, c0 := counter.writes.Load(), counter.conflict.Load()
			start := time.Now()
			burst(t, ls, revision, claims)
			elapsed := time.Since(start)
			writes, conflicts := counter.writes.Load()-w0, counter.conflict.Load()-c0
			t.Logf("%d replica(s), %d claims: seats exactly 1..%d in %s; %d record writes (%d conflicts): %.3f writes per pod",
				n, claims, claims, elapsed.Round(time.Millisecond), writes, conflicts, float64(writes)/float64(claims))
			if float64(writes)/float64(claims) > 0.1 {
				t.Errorf("%.3f record writes per pod, budget 0.1", float64(writes)/float64(claims))
			}
			record, err := client.CoordinationV1().Leases(ns.Name).Get(ctx, recordName(revision.UID), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			owner := -1
			for i, l := range ls {
				if holderOf(record) == l.identity {
					owner = i
				}
			}
			if owner < 0 {
				t.Fatalf("the record's holder %q is none of the replicas", holderOf(record))
			}
			if n == 1 {
				continue
			}
			// The owner stops (a rollout): its reservations go into the record, and the
			// next claims, at another replica, get the seats after them.
			ls[owner].Handover(ctx, false)
			next := ls[(owner+1)%n]
			for i := range 3 {
				seat, err := next.Claim(ctx, revision, types.UID(fmt.Sprintf("after-%d", i)))
				if err != nil {
					t.Fatal(err)
				}
				if seat != claims+1+i {
					t.Fatalf("claim %d after the handover got seat %d, want %d", i, seat, claims+1+i)
				}
			}
		}
	}
	// One record per revision, not one object per pod.
	leases, err := client.CoordinationV1().Leases(ns.Name).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := 2 * 3; len(leases.Items) != want {
		t.Fatalf("%d records, want %d (one per revision)", len(leases.Items), want)
	}
}
