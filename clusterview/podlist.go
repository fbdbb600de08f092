package clusterview

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// podPageSize is how many pods one page of the pod informer's list holds.
const podPageSize = 500

// newPodInformer is the placed pods' informer: its list is read in pages, each page
// slimmed before the next is read (pagedPodList), instead of client-go's one list of
// every full pod. At startup a replica holds a page of full pods and the slim rest, not
// every full pod of the cluster at once: in a cluster of 20,000 pods that whole list
// alone took more than the chart's memory limit. The watch is client-go's.
func newPodInformer(client kubernetes.Interface, selector string, resync time.Duration) cache.SharedIndexInformer {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return pagedPodList(ctx, client, selector)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.LabelSelector = selector
			return client.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, opts)
		},
	}
	// As client-go's own informers do: a client that cannot stream the initial list
	// (the fake one of unit tests) is listed. No namespace index: nothing lists the
	// cached pods by namespace (Caches adds its owner index).
	return cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, client), &corev1.Pod{}, resync, cache.Indexers{})
}

// pagedPodList lists the pods selector selects in pages of podPageSize, consistently
// (every page from one snapshot, whose resource version the list carries), and keeps of
// each pod only what trimPod reads. A page read from the API server's watch cache (the
// resource version "0" client-go asks for first) would come whole, every pod at once.
// client-go's pager hands out items or the whole list, not a page's resource version.
func pagedPodList(ctx context.Context, client kubernetes.Interface, selector string) (*corev1.PodList, error) {
	out := &corev1.PodList{}
	opts := metav1.ListOptions{LabelSelector: selector, Limit: podPageSize}
	for {
		page, err := client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("list placed pods (%d listed): %w", len(out.Items), err)
		}
		out.ResourceVersion = page.ResourceVersion
		for i := range page.Items {
			out.Items = append(out.Items, slimPod(&page.Items[i]))
		}
		if page.Continue == "" {
			return out, nil
		}
		opts.Continue = page.Continue
	}
}

// slimPod is the part of p that trimPod reads; its maps and slices are p's, so the
// rest of the page (containers, volumes, managed fields) can be collected.
func slimPod(p *corev1.Pod) corev1.Pod {
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			CreationTimestamp: p.CreationTimestamp, DeletionTimestamp: p.DeletionTimestamp,
			Annotations: p.Annotations, OwnerReferences: p.OwnerReferences,
		},
		Spec:   corev1.PodSpec{NodeName: p.Spec.NodeName, NodeSelector: p.Spec.NodeSelector},
		Status: corev1.PodStatus{Phase: p.Status.Phase, Conditions: p.Status.Conditions},
	}
}
