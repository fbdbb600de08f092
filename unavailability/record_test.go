package unavailability

import (
	"testing"
	"time"
)

// A term's cool-down doubles with each strike, up to 16 times the base.
func TestCooldownGrows(t *testing.T) {
	want := []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 8 * time.Minute}
	for i, w := range want {
		if got := cooldownFor(30*time.Second, i+1); got != w {
			t.Errorf("cool-down after %d strikes = %s, want %s", i+1, got, w)
		}
	}
}
