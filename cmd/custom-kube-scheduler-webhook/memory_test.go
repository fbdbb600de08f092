package main

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

// gcPercent reads GOGC without setting it.
func gcPercent() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}

// GOGC is Go's default while the caches sync, and the configured one again after.
func TestCollectOftenUntilSynced(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	synced := make(chan struct{})
	collectOftenUntilSynced(context.Background(), synced)
	if got := gcPercent(); got != startupGCPercent {
		t.Fatalf("GOGC %d while syncing, want %d", got, startupGCPercent)
	}
	close(synced)
	deadline := time.Now().Add(5 * time.Second)
	for gcPercent() != 400 {
		if time.Now().After(deadline) {
			t.Fatalf("GOGC %d once synced, want the configured 400 back", gcPercent())
		}
		time.Sleep(5 * time.Millisecond)
	}
	// A lower GOGC is left alone.
	debug.SetGCPercent(50)
	collectOftenUntilSynced(context.Background(), make(chan struct{}))
	if got := gcPercent(); got != 50 {
		t.Errorf("GOGC %d, want the configured 50 left alone", got)
	}
}
