// Package converge is the loop after admission: it keeps every workload
// revision that carries a strategy at its exact target and no pod stranded.
//
// One replica runs it, elected on a Lease. Per revision it detects terms whose placed
// pods cannot get a node (Pending and unschedulable past FALLBACK_AFTER, or sooner when
// Karpenter says the NodePools serving them cannot launch), records them as unavailable
// in the API server for a growing cool-down (Records, read by every replica so that
// admission places their seats on the fallback), evicts the stranded pods, moves
// fallback pods back once the cool-down ends, and repairs drift (unplaced pods, seats
// above the replica count, pods on another term than their seat's). Every move goes
// through the Eviction API within a per-workload budget of unavailable pods.
package converge
