// Package plan owns the capacity plan of a strategy: before a Deployment is annotated,
// which NodePools and EKS managed node groups serve each term, how many more pods their
// limits leave room for, whether the convergence loop has the term marked unavailable,
// and the first replica count at which a term runs short (the `plan --cluster`
// command). With prices it also projects what each term would cost; ProjectOffline
// does so without a cluster, from the instance and capacity types the terms' labels name
// (`plan --cost` without --cluster). ReadEdit and WhatIfRows are the what-if of a policy
// or Namespace manifest (`plan --cluster -f policy.yaml`): report.Build with
// State.WhatIf does the counting.
//
// Compute is pure; Collect reads the live cluster. It may import strategy, karpenter
// (matching, tolerations, headroom), karpenter/nodegroups, report (a live workload's
// pods per term), unavailability's record reader, pricing and client-go; never
// webhook.
package plan
