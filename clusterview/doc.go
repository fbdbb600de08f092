// Package clusterview is the cluster as admission and the convergence loop both read
// it: informer caches of placed pods and of the workloads that own them, trimmed to the
// fields placement reads; the owner walk from a pod's controller reference to its
// workload (Workload, ListerResolver), through a ReplicaSet to its Deployment or Argo
// Rollout (metadata only, when the API server serves Rollouts: WatchRollouts); the
// revision a placed pod counts in (Revision, PlacedSeat); which namespaces are left
// alone (NamespaceFilter); and the one view of a workload every judging reader shares
// (Views: its current revision by RevisionsOf's one rule, replicas, rolling state and
// own strategy links), for the loop, report (spread, plan) and the policy status
// (Governable: the workloads a policy may govern, exact or not and the moves it would
// make, judged on the current revision's cached pods).
//
// It also tells the convergence loop which revisions changed (OnRevisionChange), so the
// loop's work follows the changes, not the cluster's size.
//
// It may import strategy (annotation and label names), policy (the links a workload's
// policy and namespace default add to its chain), client-go and k8s.io/api; never
// webhook, ledger or converge, which build on it.
package clusterview
