package main

import "testing"

// /readyz's answer before the sync names every view not synced, from every source.
func TestNotSyncedNamesEachCache(t *testing.T) {
	err := notSynced([]string{"pods"}, nil, []string{"seat records"}, unsyncedIf(true, "unavailability records"), unsyncedIf(false, "x"))
	if want := "caches not synced: pods, seat records, unavailability records"; err == nil || err.Error() != want {
		t.Errorf("notSynced: %v, want %q", err, want)
	}
	if err := notSynced(nil, nil); err == nil {
		t.Error("notSynced with every view synced (the sync signal not yet given) returned nil")
	}
}
