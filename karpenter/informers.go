package karpenter

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/providerid"
)

// nodePoolGroupVersion is the API group/version of the NodePools watched.
const nodePoolGroupVersion = "karpenter.sh/v1"

func nodePoolGVR() schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: "karpenter.sh", Version: "v1", Resource: "nodepools"}
}

// NodePoolGVR is the resource of the NodePools the catalog watches.
func NodePoolGVR() schema.GroupVersionResource { return nodePoolGVR() }

// newNodePoolInformer watches NodePools through the dynamic client and
// stores them as typed *karpv1.NodePool, converted once per event rather than
// on every admission.
func newNodePoolInformer(client dynamic.Interface, resync time.Duration) (cache.SharedIndexInformer, error) {
	return newTypedInformer(client, nodePoolGVR(), resync, toNodePool)
}

// newTypedInformer watches one Karpenter resource through the dynamic client, storing
// what transform makes of each object (a typed, trimmed copy).
func newTypedInformer(client dynamic.Interface, gvr schema.GroupVersionResource, resync time.Duration, transform cache.TransformFunc) (cache.SharedIndexInformer, error) {
	res := client.Resource(gvr)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return res.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return res.Watch(ctx, opts)
		},
	}
	// The wrapper tells the reflector when a client (a fake one in tests)
	// cannot stream the initial list as watch events.
	inf := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, client), &unstructured.Unstructured{}, resync, cache.Indexers{})
	if err := inf.SetTransform(transform); err != nil {
		return nil, fmt.Errorf("setting the %s transform: %w", gvr.Resource, err)
	}
	return inf, nil
}

// served reports whether the API server serves resource in Karpenter's group/version
// (nodePoolGroupVersion): false, not an error, when the group/version is unknown.
func served(disc discovery.DiscoveryInterface, resource string) (bool, error) {
	list, err := disc.ServerResourcesForGroupVersion(nodePoolGroupVersion)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("discovering %s: %w", nodePoolGroupVersion, err)
	}
	for _, r := range list.APIResources {
		if r.Name == resource {
			return true, nil
		}
	}
	return false, nil
}

// toNodePool converts an unstructured NodePool to the typed one. Tombstones
// and objects that are already typed pass through.
func toNodePool(obj interface{}) (interface{}, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	np := &karpv1.NodePool{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), np); err != nil {
		return nil, fmt.Errorf("converting NodePool %q: %w", u.GetName(), err)
	}
	np.ManagedFields = nil
	return np, nil
}

// nodePageSize is how many Nodes one page of the Node informer's list holds.
const nodePageSize = 500

// instanceIndex indexes the Nodes by the instance their spec.providerID names
// (providerid.InstanceID): Catalog.NodeByInstance.
const instanceIndex = "instance"

// newNodeInformer watches Nodes, keeping only what matching and the interruption
// signals' lookup by instance need. Its list is read in pages, each slimmed before the
// next (listSlimNodes): an EKS node's status carries its image list, tens of KiB, and a
// list of thousands of them whole would take more than the webhook's memory limit at
// startup.
func newNodeInformer(client kubernetes.Interface, resync time.Duration) (cache.SharedIndexInformer, error) {
	nodes := client.CoreV1().Nodes()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return listSlimNodes(ctx, client, opts.LabelSelector)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return nodes.Watch(ctx, opts)
		},
	}
	inf := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, client), &corev1.Node{}, resync,
		cache.Indexers{instanceIndex: nodeInstance})
	if err := inf.SetTransform(slimNode); err != nil {
		return nil, fmt.Errorf("setting Node transform: %w", err)
	}
	return inf, nil
}

// listSlimNodes lists the Nodes in pages of nodePageSize, consistently (every page from
// one snapshot, whose resource version the list carries), each Node slimmed (slimNode).
// client-go's pager hands out items or the whole list, not a page's resource version.
func listSlimNodes(ctx context.Context, client kubernetes.Interface, selector string) (*corev1.NodeList, error) {
	out := &corev1.NodeList{}
	opts := metav1.ListOptions{LabelSelector: selector, Limit: nodePageSize}
	for {
		page, err := client.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("list nodes (%d listed): %w", len(out.Items), err)
		}
		out.ResourceVersion = page.ResourceVersion
		for i := range page.Items {
			slim, _ := slimNode(&page.Items[i])
			out.Items = append(out.Items, *slim.(*corev1.Node))
		}
		if page.Continue == "" {
			return out, nil
		}
		opts.Continue = page.Continue
	}
}

// nodeInstance is instanceIndex's function: the instance a Node's providerID names,
// none when it names none (not set yet, another cloud).
func nodeInstance(obj interface{}) ([]string, error) {
	if n, ok := obj.(*corev1.Node); ok {
		if id, ok := providerid.InstanceID(n.Spec.ProviderID); ok {
			return []string{id}, nil
		}
	}
	return nil, nil
}

// slimNode keeps a Node's name, labels, taints, unschedulable flag, providerID,
// deletion time and Ready condition: images, addresses, capacity and managed fields
// would make the cache many times larger on a big cluster.
func slimNode(obj interface{}) (interface{}, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	slim := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:              n.Name,
			UID:               n.UID,
			ResourceVersion:   n.ResourceVersion,
			Labels:            n.Labels,
			DeletionTimestamp: n.DeletionTimestamp,
		},
		Spec: corev1.NodeSpec{Taints: n.Spec.Taints, Unschedulable: n.Spec.Unschedulable, ProviderID: n.Spec.ProviderID},
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			slim.Status.Conditions = []corev1.NodeCondition{{Type: c.Type, Status: c.Status}}
			break
		}
	}
	return slim, nil
}

// nodeUsable reports whether a node can take new pods: Ready, not cordoned,
// not being deleted.
func nodeUsable(n *corev1.Node) bool {
	if n.DeletionTimestamp != nil || n.Spec.Unschedulable {
		return false
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// nodePoolUsable mirrors the provisioner's filter, except that a pool whose
// Ready condition is not reported yet counts: Karpenter reconciles a new pool
// within seconds, and a pod admitted meanwhile should still be sent there.
// Pools being deleted or explicitly not Ready (e.g. a missing node class) do
// not count.
func nodePoolUsable(np *karpv1.NodePool) bool {
	if np.DeletionTimestamp != nil {
		return false
	}
	for _, c := range np.Status.Conditions {
		if c.Type == "Ready" {
			return c.Status != metav1.ConditionFalse
		}
	}
	return true
}
