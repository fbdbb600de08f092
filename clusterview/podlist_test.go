package clusterview

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// The pod cache lists in pages of podPageSize from one consistent snapshot, as the API
// server pages a list read from etcd, and caches every pod of every page.
func TestPodCacheListsInPages(t *testing.T) {
	const n = 2*podPageSize + 17
	client := fake.NewClientset()
	var (
		mu    sync.Mutex
		calls []metav1.ListOptions
	)
	client.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		opts := a.(k8stesting.ListActionImpl).ListOptions
		mu.Lock()
		calls = append(calls, opts)
		mu.Unlock()
		from := 0
		if opts.Continue != "" {
			var err error
			if from, err = strconv.Atoi(opts.Continue); err != nil {
				return true, nil, fmt.Errorf("bad continue token %q", opts.Continue)
			}
		}
		to := n
		if opts.Limit > 0 {
			to = min(n, from+int(opts.Limit))
		}
		page := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "777"}}
		for i := from; i < to; i++ {
			page.Items = append(page.Items, corev1.Pod{ObjectMeta: metav1.ObjectMeta{
				Name: fmt.Sprintf("web-%d", i), Namespace: testNS, UID: types.UID(fmt.Sprintf("pod-%d", i)), ResourceVersion: "5",
				Labels:          map[string]string{strategy.LabelManaged: "true"},
				Annotations:     map[string]string{strategy.AnnotationSeat: strconv.Itoa(i + 1)},
				OwnerReferences: []metav1.OwnerReference{controllerRef("ReplicaSet", "web-5c4ff85997", testRSUID)},
			}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1"}}}})
		}
		if to < n {
			page.Continue = strconv.Itoa(to)
		}
		return true, page, nil
	})
	client.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
		return true, watch.NewFake(), nil
	})
	caches, err := NewCaches(client, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	caches.Start(ctx)
	if err := caches.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := len(caches.Held(Revision{Namespace: testNS, UID: testRSUID})); got != n {
		t.Errorf("%d seats held from the cache, want %d", got, n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 3 {
		t.Fatalf("%d list calls, want 3 pages", len(calls))
	}
	for i, c := range calls {
		if c.Limit != podPageSize || c.ResourceVersion != "" || c.LabelSelector != strategy.LabelManaged+"=true" {
			t.Errorf("page %d asked with limit %d, resource version %q, selector %q; want %d, \"\" (one consistent snapshot), the managed label",
				i+1, c.Limit, c.ResourceVersion, c.LabelSelector, podPageSize)
		}
	}
}

// The handlers of the ledger and of the convergence loop take no informer resyncs: one
// hands over every cached pod unchanged, which would cost each of them a call per pod.
func TestHandlersTakeNoResyncs(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: "web-1", Namespace: testNS, UID: "pod-1", ResourceVersion: "5",
		Labels:          map[string]string{strategy.LabelManaged: "true"},
		Annotations:     map[string]string{strategy.AnnotationSeat: "1"},
		OwnerReferences: []metav1.OwnerReference{controllerRef("ReplicaSet", "web-5c4ff85997", testRSUID)},
	}}
	// The shortest resync client-go allows.
	caches, err := NewCaches(fake.NewClientset(pod), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	visible, changed := 0, 0
	if _, err := caches.OnPlacedPods(func(*corev1.Pod) { mu.Lock(); visible++; mu.Unlock() }, func(*corev1.Pod) {}); err != nil {
		t.Fatal(err)
	}
	if _, err := caches.OnRevisionChange(func(types.UID) { mu.Lock(); changed++; mu.Unlock() }); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	caches.Start(ctx)
	if err := caches.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3500 * time.Millisecond) // three resync periods
	mu.Lock()
	defer mu.Unlock()
	if visible != 1 || changed != 1 {
		t.Errorf("the pod was seen %d times by the ledger's handler and %d by the loop's, want once each (its add)", visible, changed)
	}
}
