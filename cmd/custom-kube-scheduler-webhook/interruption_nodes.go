package main

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/interruption"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/karpenter"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/providerid"
)

// catalogNodes is the interruption tracker's node view (interruption.Nodes) read from
// the capacity catalog's Node watch: one watch and one slim copy of each Node serve
// both, where a watch of the signals' own would list every Node whole once more.
type catalogNodes struct {
	catalog *karpenter.Catalog
}

var _ interruption.Nodes = catalogNodes{}

// ByInstance implements interruption.Nodes.
func (c catalogNodes) ByInstance(id string) (interruption.Node, bool) {
	n, ok := c.catalog.NodeByInstance(id)
	if !ok {
		return interruption.Node{}, false
	}
	return interruption.Node{Name: n.Name, Instance: id, Labels: n.Labels}, true
}

// Each implements interruption.Nodes.
func (c catalogNodes) Each(fn func(interruption.Node)) {
	c.catalog.EachNode(func(n *corev1.Node) {
		id, _ := providerid.InstanceID(n.Spec.ProviderID)
		fn(interruption.Node{Name: n.Name, Instance: id, Labels: n.Labels})
	})
}

// HasSynced implements interruption.Nodes.
func (c catalogNodes) HasSynced() bool { return c.catalog.NodesSynced() }
