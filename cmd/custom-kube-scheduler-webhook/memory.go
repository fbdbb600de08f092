package main

import (
	"context"
	"runtime/debug"
)

// startupGCPercent is GOGC while a replica's caches list the cluster. The chart's GOGC of
// 400 lets the heap grow to five times its live size between collections, which pays at
// steady state (fewer collections under admission load) but not during the initial
// lists, when every page of full pods read becomes garbage at once: at 20,000 pods the
// heap then ran into GOMEMLIMIT. Go's default collects at twice the live size.
const startupGCPercent = 100

// collectOftenUntilSynced lowers GOGC to startupGCPercent (unless it is lower already,
// or off) until synced closes or ctx ends, then restores it.
func collectOftenUntilSynced(ctx context.Context, synced <-chan struct{}) {
	configured := debug.SetGCPercent(startupGCPercent)
	if configured < 0 || configured <= startupGCPercent {
		debug.SetGCPercent(configured)
		return
	}
	go func() {
		select {
		case <-synced:
		case <-ctx.Done():
		}
		debug.SetGCPercent(configured)
	}()
}
