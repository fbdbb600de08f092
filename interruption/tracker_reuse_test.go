package interruption

import (
	"fmt"
	"testing"
	"time"
)

// TestTrackerSignalStaysWithItsInstance: EKS names a node after its private IP, which
// EC2 hands to a new instance once the old one is gone. A node replaced under the same
// name is another instance: the old instance's signal must not make the new node (and
// its pods) signalled, nor count toward its term's risk.
func TestTrackerSignalStaysWithItsInstance(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	nodes := pools()
	tr, _, _ := newTestTracker(t, nodes, &now)
	want := Origin{Account: "123456789012", Region: "eu-west-1"}
	spotA := term(t, "pool=spot-a")
	for i, node := range []string{"a0", "a1"} {
		body := []byte(event(fmt.Sprint("e", i), "EC2 Spot Instance Interruption Warning", want.Account, want.Region, now.Add(-time.Minute), fmt.Sprintf(`{"instance-id":"i-%s"}`, node)))
		if got := tr.Handle(body, want); got.Result != resultSignal {
			t.Fatalf("signal for %s: %+v", node, got)
		}
	}
	if v := tr.Assess(spotA, now); !v.AtRisk || len(v.Signalled) != 2 {
		t.Fatalf("spot-a with 2 of 4 nodes warned: at risk %v, %d signalled", v.AtRisk, len(v.Signalled))
	}
	// a0's instance is reclaimed; a new instance gets its private IP, so its name.
	for i := range nodes.nodes {
		if nodes.nodes[i].Name == "a0" {
			nodes.nodes[i].Instance = "i-a0-new"
		}
	}
	now = now.Add(2 * time.Second) // past the verdict's reuse
	v := tr.Assess(spotA, now)
	if _, _, instance, ok := v.Node("a0"); ok {
		t.Errorf("node a0, now instance i-a0-new, is signalled with instance %s's warning", instance)
	}
	if v.AtRisk || len(v.Signalled) != 1 {
		t.Errorf("spot-a with 1 of 4 nodes warned (a0 replaced): at risk %v, %d signalled, want not at risk, 1", v.AtRisk, len(v.Signalled))
	}
	if _, _, instance, ok := v.Node("a1"); !ok || instance != "i-a1" {
		t.Errorf("a1 lost its own warning: %q %v", instance, ok)
	}
}
