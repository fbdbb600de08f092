// Package report compares each workload that carries a strategy with its target: per
// term the pods placed, running and pending, their nodes, what serves the term, and
// whether the spread is exact (the verdict of the `spread` command, the soak and the
// end-to-end tests). It owns that report and what it costs:
//
//   - Build makes the report from listed objects (State), or with the pods read one at
//     a time from a reader's own store (State.PodsOf: serve's pod cache); Collect lists
//     them from the API server, with the policies (ReadPolicies), the webhook's scope
//     (ReadScope) and the nodes, paged and trimmed (ReadNodes), and what the pods on
//     reserved nodes request (ReadReservedUse: the reserved room idle beside a term's
//     on-demand pods, idle.go);
//   - AddCost prices each term's share of its nodes through a pricing.Source
//     (`spread --cost`);
//   - CostMetrics and CostRefresher export that realized cost per workload and term as
//     Prometheus series, refreshed every DefaultCostInterval (serve's COST_METRICS);
//     Views reads their State from serve's caches rather than listing it, one placed
//     pod at a time; NewCostRefresher builds serve's refresher from its CostSettings
//     (the price file, or AWS behind a disk cache). cmd only wires them (the settings,
//     the registry, the elected replica).
//
// It may import clusterview (the workload views: which revision is current), strategy,
// policy and api/v1alpha1 (the strategy a workload resolves to), karpenter and karpenter/nodegroups (what serves a term), unavailability (the
// loop's records), pricing, client-go, k8s.io/api and the Prometheus client; never
// webhook, ledger or converge.
package report
