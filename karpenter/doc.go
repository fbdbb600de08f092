// Package karpenter tells which capacity can carry a strategy term, i.e. a set
// of node labels that the webhook puts into a pod's nodeSelector, and which
// tolerations a pod sent there needs.
//
// Three kinds of capacity are considered:
//   - Karpenter NodePools (karpenter.sh/v1), matched with Karpenter's own
//     requirement code the way its provisioner matches a pod's nodeSelector
//     against a NodePool template;
//   - EKS managed node groups (see the nodegroups sub-package), matched from
//     the labels their nodes will carry, so a group scaled to zero counts;
//   - Ready, schedulable Nodes whose labels carry the term.
//
// Catalog watches all three and answers Serving; Matcher holds the pure
// matching rules; TolerationsFor and MergeTolerations derive the pod's
// tolerations from the taints of the NodePools and node groups that serve it.
// Catalog's Node watch also answers which node an instance is (NodeByInstance, by
// spec.providerID) for the interruption signals, so serve keeps one watch of Nodes.
//
// It may import its nodegroups sub-package, strategy and providerid (the instance a
// providerID names).
package karpenter
