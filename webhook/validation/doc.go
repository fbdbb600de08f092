// Package validation is the validating admission of workloads: it checks the strategy
// of Deployments, StatefulSets, ReplicaSets and Argo Rollouts, of PlacementPolicies and
// ClusterPlacementPolicies, and a Namespace's default at apply time
// (WorkloadValidator), and warns where the strategy governs nothing.
//
// It reads terms through placement's Capacity and ImageArchitectures (the pod
// placement the checks mirror) and counts its outcomes through a Counter
// (webhook.Metrics). It may import strategy, policy, api/v1alpha1, imagearch (its
// request type), webhook (Allow, the outcomes) and webhook/placement; nothing but cmd
// imports it.
package validation
