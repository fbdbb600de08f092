// Package converge is the loop after admission: it keeps every workload
// revision that carries a strategy at its exact target and no pod stranded.
//
// One replica runs it, elected on a Lease (elect.go). A revision is passed when
// something that matters to it changes, or while it waits for time to pass (queue.go:
// client-go's work queue, one worker); an idle revision costs nothing. A revision's
// pass (loop.go, converge) goes in three steps:
//   - observe.go: one typed snapshot of the revision, read from the caches by key: its
//     workload and strategy (strategy.Resolver), its placed pods as clusterview.PlacedPod
//     values, its unavailability record, Karpenter's word on the terms whose pods wait
//     for a node, and the pods admitted without a seat when it is short of placed ones;
//   - plan.go: a pure function from the snapshot, the clock and the loop's memory to a
//     plan: the terms to mark unavailable (pods Pending and unschedulable past
//     FALLBACK_AFTER, or sooner when Karpenter says the NodePools serving them cannot
//     launch), the placement around the unavailable terms, and the pods off it
//     (stranded, drifted, unplaced, seats above the replica count, returns after a
//     cool-down with one canary first per term) in eviction order with their cost of
//     the per-workload budget, and the notes to say. A term EC2's interruption signals
//     put at risk (Config.Interruptions) is marked unavailable the same way, until a
//     cool-down after its last signal, and its pods on signalled nodes move;
//   - act.go: the one place that writes: the unavailability records (package
//     unavailability, which every replica reads so that admission places the seats on
//     the fallback), Events with typed keys (note.go), evictions through the Eviction
//     API within the budget and the PodDisruptionBudgets.
//
// What the loop remembers between passes is written from memory.go only.
//
// It reads the cluster through clusterview, Karpenter's word through karpenter and EC2's
// interruption signals through interruption's verdicts; it may import strategy,
// ownership, unavailability, client-go and the Prometheus client, never webhook or
// ledger.
package converge
