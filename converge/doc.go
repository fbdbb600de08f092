// Package converge is the loop after admission: it keeps every workload
// revision that carries a strategy at its exact target and no pod stranded.
//
// One replica runs it, elected on a Lease (elect.go). A revision is passed when
// something that matters to it changes, or while it waits for time to pass (queue.go:
// client-go's work queue, one worker); an idle revision costs nothing. A revision's
// pass (loop.go) goes in a few named steps:
//   - detect.go: survey the revision's placed pods and mark the terms whose pods cannot
//     get a node (Pending and unschedulable past FALLBACK_AFTER, or sooner when
//     Karpenter says the NodePools serving them cannot launch) unavailable for a
//     growing cool-down, in records every replica reads (record.go), so that admission
//     places their seats on the fallback;
//   - fallback.go: place the seats around the unavailable terms, and return to a term
//     after its cool-down with one canary first;
//   - repair.go: find the pods off their placement (stranded, drifted, unplaced, seats
//     above the replica count) and move them through the Eviction API within a
//     per-workload budget of unavailable pods.
//
// It reads the cluster through clusterview and Karpenter's word through karpenter; it
// may import strategy, ownership, client-go and the Prometheus client, never webhook or
// ledger.
package converge
