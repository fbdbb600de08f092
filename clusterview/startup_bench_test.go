package clusterview_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// startupPods is how many placed pods BenchmarkStartup lists.
const startupPods = 20000

// pagedClient is a fake client whose pod list is pods, encoded, served in the pages
// asked for (each page decoded on the call, as a client decodes the API server's).
func pagedClient(tb testing.TB, pods [][]byte) *fake.Clientset {
	tb.Helper()
	client := fake.NewClientset()
	client.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, k8sruntime.Object, error) {
		opts := a.(k8stesting.ListActionImpl).ListOptions
		from, _ := strconv.Atoi(opts.Continue)
		to := len(pods)
		if opts.Limit > 0 {
			to = min(to, from+int(opts.Limit))
		}
		page := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "200000"}, Items: make([]corev1.Pod, to-from)}
		for i, raw := range pods[from:to] {
			if err := json.Unmarshal(raw, &page.Items[i]); err != nil {
				return true, nil, err
			}
		}
		if to < len(pods) {
			page.Continue = strconv.Itoa(to)
		}
		return true, page, nil
	})
	client.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
		return true, watch.NewFake(), nil
	})
	return client
}

// BenchmarkStartup is a replica's start with startupPods placed pods: the paged list of
// the pods (decoded page by page), the pod cache, and the seat ledger fed by it, until
// all have synced (the pod cache's part of the time to ready). Add -cpuprofile to see
// where the time goes.
func BenchmarkStartup(b *testing.B) {
	pods := benchPodJSON(b, startupPods)
	for b.Loop() {
		ctx, cancel := context.WithCancel(context.Background())
		startSynced(ctx, b, pagedClient(b, pods), true)
		cancel()
	}
}
