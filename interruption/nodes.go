package interruption

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// InstanceID is the instance a node's spec.providerID names: EC2's
// "aws:///us-west-2a/i-0123456789abcdef0" (also "aws://us-west-2a/i-..."), the last
// path element; and the kwok provider's "kwok://<node name>" (the local cluster),
// its name. ok is false for anything else (no providerID yet, another cloud).
func InstanceID(providerID string) (string, bool) {
	scheme, rest, found := strings.Cut(providerID, "://")
	if !found || rest == "" {
		return "", false
	}
	switch scheme {
	case "aws":
		rest = strings.TrimRight(rest, "/")
		id := rest[strings.LastIndexByte(rest, '/')+1:]
		if !strings.HasPrefix(id, "i-") || !validInstance(id) {
			return "", false
		}
		return id, true
	case "kwok":
		if strings.Contains(rest, "/") || !validInstance(rest) {
			return "", false
		}
		return rest, true
	}
	return "", false
}

// Node is what the mapping keeps of a node.
type Node struct {
	Name     string
	Instance string
	Labels   map[string]string
}

// Nodes is the node view the tracker reads; NodeInformer implements it.
type Nodes interface {
	// ByInstance returns the node of an instance id.
	ByInstance(id string) (Node, bool)
	// Each calls fn with every node (Instance "" when its providerID names none).
	Each(fn func(Node))
	HasSynced() bool
}

const instanceIndex = "instance"

// NodeInformer watches Nodes, keeping each one's name, labels and instance id only,
// indexed by instance id.
type NodeInformer struct {
	inf cache.SharedIndexInformer
}

// NewNodeInformer builds the informer; call Run.
func NewNodeInformer(client kubernetes.Interface, resync time.Duration) (*NodeInformer, error) {
	nodes := client.CoreV1().Nodes()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return nodes.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return nodes.Watch(ctx, opts)
		},
	}
	inf := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, client), &corev1.Node{}, resync, cache.Indexers{
		instanceIndex: func(obj any) ([]string, error) {
			if n, ok := obj.(*corev1.Node); ok {
				if id, ok := InstanceID(n.Spec.ProviderID); ok {
					return []string{id}, nil
				}
			}
			return nil, nil
		},
	})
	if err := inf.SetTransform(slimNode); err != nil {
		return nil, fmt.Errorf("interruption: node transform: %w", err)
	}
	return &NodeInformer{inf: inf}, nil
}

// slimNode keeps a Node's name, labels and providerID: images, conditions and
// addresses would make the cache many times larger.
func slimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion, Labels: n.Labels},
		Spec:       corev1.NodeSpec{ProviderID: n.Spec.ProviderID},
	}, nil
}

// Run watches until ctx ends.
func (n *NodeInformer) Run(ctx context.Context) { n.inf.RunWithContext(ctx) }

// HasSynced reports whether the nodes have been listed.
func (n *NodeInformer) HasSynced() bool { return n.inf.HasSynced() }

// ByInstance implements Nodes.
func (n *NodeInformer) ByInstance(id string) (Node, bool) {
	objs, err := n.inf.GetIndexer().ByIndex(instanceIndex, id)
	if err != nil || len(objs) == 0 {
		return Node{}, false
	}
	node, ok := objs[0].(*corev1.Node)
	if !ok {
		return Node{}, false
	}
	return Node{Name: node.Name, Instance: id, Labels: node.Labels}, true
}

// Each implements Nodes.
func (n *NodeInformer) Each(fn func(Node)) {
	for _, obj := range n.inf.GetStore().List() {
		node, ok := obj.(*corev1.Node)
		if !ok {
			continue
		}
		id, _ := InstanceID(node.Spec.ProviderID)
		fn(Node{Name: node.Name, Instance: id, Labels: node.Labels})
	}
}
