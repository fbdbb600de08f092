package clusterview

import (
	"context"
	"errors"
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

// newPodInformer is the placed pods' informer. Its list is read in one request
// streamed and trimmed pod by pod (streamedPodList), at the resource version the
// reflector asks for, which the API server's watch cache answers; or, from an API
// server that does not answer in protobuf (and from the fake client of unit tests), in
// pages, each page trimmed before the next is read (pagedPodList). Either way a replica
// at startup holds what the cache keeps and a page or a pod of full pods, not client-go's
// one list of every full pod of the cluster: in a cluster of 20,000 pods that whole list
// alone took more than the chart's memory limit. The watch is client-go's.
func newPodInformer(client kubernetes.Interface, selector string, resync time.Duration) cache.SharedIndexInformer {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			if rc := restClientOf(client); rc != nil {
				list, err := streamedPodList(ctx, rc, selector, opts)
				if err == nil {
					return list, nil
				}
				if !errors.Is(err, errNotProtobuf) {
					return nil, err
				}
			}
			list, err := pagedPodList(ctx, client, selector)
			if err != nil {
				return nil, err
			}
			return list, nil
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
// (every page from one snapshot, whose resource version the list carries), and trims
// each page's pods into cachedPods (trimPod) before the next page is read, so that
// listing holds what the cache will keep and one page of full pods, never a list of
// every pod. A page read from the API server's watch cache (the resource version "0"
// client-go asks for first) would come whole, every pod at once. client-go's pager
// hands out items or the whole list, not a page's resource version.
func pagedPodList(ctx context.Context, client kubernetes.Interface, selector string) (*trimmedPodList, error) {
	out := &trimmedPodList{}
	opts := metav1.ListOptions{LabelSelector: selector, Limit: podPageSize}
	for {
		page, err := client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("list placed pods (%d listed): %w", len(out.Items), err)
		}
		out.ResourceVersion = page.ResourceVersion
		for i := range page.Items {
			p, err := trimPod(&page.Items[i])
			if err != nil {
				return nil, fmt.Errorf("trim pod %s/%s: %w", page.Items[i].Namespace, page.Items[i].Name, err)
			}
			out.Items = append(out.Items, p.(*cachedPod))
		}
		if page.Continue == "" {
			return out, nil
		}
		opts.Continue = page.Continue
	}
}

// trimmedPodList is the pod informer's list: cachedPods, which its transform (trimPod)
// keeps as they are. The reflector reads it as any list (meta.ExtractList, the list's
// resource version).
type trimmedPodList struct {
	metav1.TypeMeta
	metav1.ListMeta
	Items []runtime.Object
}

// DeepCopyObject implements runtime.Object.
func (l *trimmedPodList) DeepCopyObject() runtime.Object {
	out := &trimmedPodList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	out.Items = make([]runtime.Object, len(l.Items))
	for i, item := range l.Items {
		out.Items[i] = item.DeepCopyObject()
	}
	return out
}
