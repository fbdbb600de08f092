// Package policy tells, for a workload (its namespace, kind and labels), the strategy
// links that come after the workload's own annotations: the most specific matching
// PlacementPolicy or ClusterPlacementPolicy, then the namespace default (the Namespace's
// CustomPodScheduleStrategy annotation). strategy.Resolve walks them after the pod
// template and the workload, so every reader (admission, validation, the convergence
// loop, spread, plan) resolves a strategy one way and names where it came from.
//
// It also names the one workload kind a policy may select outside apps/v1, Argo Rollouts'
// Rollout (RolloutResource, IsRollout, RolloutsServed), for every reader that follows a
// ReplicaSet to it.
//
// Index is an immutable view over listed objects (the CLI's one-shot reads); Cache keeps
// one current from informers (the webhook). A lookup allocates nothing.
//
// It may import api/v1alpha1 and strategy, client-go and k8s.io/api; nothing of
// admission or the loop.
package policy
