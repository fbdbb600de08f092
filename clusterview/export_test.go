package clusterview

// Hooks for the external tests of this package (package clusterview_test), which
// measure the caches wired to the seat ledger as serve wires them.

// RaceEnabled reports whether the race detector is on.
const RaceEnabled = raceEnabled

// CachedPods returns how many pods the pod cache holds.
func CachedPods(c *Caches) int { return len(c.podIndex.ListKeys()) }
