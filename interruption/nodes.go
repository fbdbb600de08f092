package interruption

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/providerid"
)

// Node is what the tracker needs of a node.
type Node struct {
	Name string
	// Instance is the instance its spec.providerID names (providerid.InstanceID); ""
	// when it names none.
	Instance string
	Labels   map[string]string
}

// Nodes is the node view the tracker reads: NodesOf the capacity catalog's Node watch
// in serve, so that signals cost no watch and no copy of the nodes of their own.
type Nodes interface {
	// ByInstance returns the node of an instance id.
	ByInstance(id string) (Node, bool)
	// Each calls fn with every node (Instance "" when its providerID names none).
	Each(fn func(Node))
	// HasSynced reports whether the nodes have been listed.
	HasSynced() bool
}

// nodeSource is a Node watch that finds a node by the instance its providerID names:
// the capacity catalog's (karpenter.Catalog). Its Nodes are shared: never modified.
type nodeSource interface {
	NodeByInstance(id string) (*corev1.Node, bool)
	EachNode(fn func(*corev1.Node))
	NodesSynced() bool
}

// NodesOf is the tracker's node view read from src: one watch and one slim copy of each
// Node serve both, where a watch of the signals' own would list every Node whole once
// more.
func NodesOf(src nodeSource) Nodes { return sourceNodes{src} }

type sourceNodes struct{ src nodeSource }

func (s sourceNodes) ByInstance(id string) (Node, bool) {
	n, ok := s.src.NodeByInstance(id)
	if !ok {
		return Node{}, false
	}
	return Node{Name: n.Name, Instance: id, Labels: n.Labels}, true
}

func (s sourceNodes) Each(fn func(Node)) {
	s.src.EachNode(func(n *corev1.Node) {
		id, _ := providerid.InstanceID(n.Spec.ProviderID)
		fn(Node{Name: n.Name, Instance: id, Labels: n.Labels})
	})
}

func (s sourceNodes) HasSynced() bool { return s.src.NodesSynced() }
