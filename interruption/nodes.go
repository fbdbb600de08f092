package interruption

// Node is what the tracker needs of a node.
type Node struct {
	Name string
	// Instance is the instance its spec.providerID names (providerid.InstanceID); ""
	// when it names none.
	Instance string
	Labels   map[string]string
}

// Nodes is the node view the tracker reads. serve gives one read from the capacity
// catalog's Node watch (karpenter), so that signals cost no watch and no copy of the
// nodes of their own.
type Nodes interface {
	// ByInstance returns the node of an instance id.
	ByInstance(id string) (Node, bool)
	// Each calls fn with every node (Instance "" when its providerID names none).
	Each(fn func(Node))
	// HasSynced reports whether the nodes have been listed.
	HasSynced() bool
}
