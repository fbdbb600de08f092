// Package v1alpha1 holds the policy API of the API group custom-kube-scheduler-webhook.io,
// version v1alpha1: PlacementPolicy (namespaced) and ClusterPlacementPolicy (cluster
// scoped), which apply a strategy, in the CustomPodScheduleStrategy annotation's grammar,
// to the workloads their selectors match. It owns the Go types, their deepcopy
// (zz_generated.deepcopy.go) and the CRDs generated from them (config/crd, copied into
// the chart's crds/ folder: `make generate`). It imports no package of this module: every
// reader (the policy package, the webhook, the CLI) builds on it.
//
// The names mirror Role/ClusterRole and Kyverno's Policy/ClusterPolicy: the namespaced
// kind is what an application namespace's owners may write, the Cluster kind is the
// platform team's, and "Placement" says what they decide (not scheduling in general).
//
// +kubebuilder:object:generate=true
// +groupName=custom-kube-scheduler-webhook.io
package v1alpha1
