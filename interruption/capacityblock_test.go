package interruption

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// blockWarning is a Capacity Block's expiration warning for reservation, ending at end.
func blockWarning(id, reservation string, at, end time.Time) []byte {
	return []byte(event(id, "Capacity Block Expiration Warning", "123456789012", "eu-west-1", at,
		fmt.Sprintf(`{"capacity-reservation-id":%q,"end-date":%q}`, reservation, end.UTC().Format(time.RFC3339))))
}

// A Capacity Block's warning signals every node labelled with its reservation, the
// single one of a term included (its end is a date, not a risk), until the block's end
// however long after the window that is; nodes of other reservations are not signalled.
func TestCapacityBlockEndSignalsItsNodesUntilTheEnd(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	nodes := pools()
	nodes.nodes = append(nodes.nodes,
		Node{Name: "cb0", Instance: "i-cb0", Labels: map[string]string{"karpenter.sh/capacity-type": "reserved", strategy.ReservationIDLabel: "cr-0123456789abcdef0"}},
		Node{Name: "odcr0", Instance: "i-odcr0", Labels: map[string]string{"karpenter.sh/capacity-type": "reserved", strategy.ReservationIDLabel: "cr-11111111"}},
	)
	tr, m, changed := newTestTracker(t, nodes, &now)
	set, spot := term(t, "karpenter.sh/capacity-type=reserved|on-demand"), term(t, "karpenter.sh/capacity-type=spot")
	tr.Assess(set, now)
	want := Origin{Account: "123456789012", Region: "eu-west-1"}
	end := now.Add(40 * time.Minute)

	steps := []struct {
		body   []byte
		result string
	}{
		{blockWarning("w1", "cr-99999999", now, end), resultUnknownInstance},
		{blockWarning("w2", "cr-0123456789abcdef0", now.Add(-time.Hour), now.Add(-time.Minute)), resultStale},
		{blockWarning("w3", "cr-0123456789abcdef0", now.Add(-15*time.Minute), end), resultSignal},
		{blockWarning("w3", "cr-0123456789abcdef0", now.Add(-15*time.Minute), end), resultDuplicate},
	}
	for i, s := range steps {
		if got := tr.Handle(s.body, want); got.Result != s.result || got.Retry {
			t.Fatalf("step %d: %+v, want %s", i, got, s.result)
		}
	}
	if *changed != 1 {
		t.Errorf("Changed called %d times, want once", *changed)
	}

	// Fifteen minutes after the warning, beyond the 10-minute window: still signalled.
	v := tr.Assess(set, now)
	if !v.AtRisk || len(v.Signalled) != 1 || v.Nodes != 3 || !v.Ends.Equal(end) || v.ByKind[KindCapacityBlockEnd] != 1 {
		t.Fatalf("set term after the warning: %+v", v)
	}
	// The evidence leads with the block, not with a share rule one node does not meet.
	if ev := v.Evidence(); !strings.HasPrefix(ev, "a Capacity Block ends at "+end.UTC().Format(time.RFC3339)+"; EC2 signals for 1 of the term's 3 nodes") ||
		!strings.Contains(ev, "(one node of a block is enough)") {
		t.Errorf("evidence %q", ev)
	}
	at, kind, _, ok := v.Node("cb0")
	if !ok || kind != KindCapacityBlockEnd || !at.Equal(now.Add(-15*time.Minute)) {
		t.Errorf("cb0: %v %s %v", at, kind, ok)
	}
	if _, _, _, ok := v.Node("odcr0"); ok {
		t.Error("a node of another reservation is signalled")
	}
	if v := tr.Assess(spot, now); v.AtRisk || len(v.Signalled) != 0 {
		t.Errorf("spot term: %+v", v)
	}
	if got := testutil.ToFloat64(m.signals.WithLabelValues("karpenter.sh/capacity-type=reserved|on-demand", string(KindCapacityBlockEnd))); got != 1 {
		t.Errorf("signals_total for the set term: %v, want 1", got)
	}

	// A node Karpenter launched into the block after the warning is the block's too.
	nodes.nodes = append(nodes.nodes, Node{Name: "cb1", Instance: "i-cb1", Labels: map[string]string{"karpenter.sh/capacity-type": "reserved", strategy.ReservationIDLabel: "cr-0123456789abcdef0"}})
	now = now.Add(20 * time.Minute)
	if v := tr.Assess(set, now); len(v.Signalled) != 2 || !v.AtRisk {
		t.Errorf("after a second node joined the block: %+v", v)
	}

	// At the end the nodes are EC2's: the signal no longer holds, and is forgotten.
	now = end
	tr.Refresh(now)
	if v := tr.Assess(set, now); v.AtRisk || len(v.Signalled) != 0 || len(tr.blocks) != 0 {
		t.Errorf("at the block's end: %+v, %d blocks kept", v, len(tr.blocks))
	}
}

// Rule.Assess: one node of an ending block makes a big term at risk; the same node with
// a rebalance recommendation does not.
func TestRuleCapacityBlockEndIsCertain(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	names := []string{"n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7"}
	end := now.Add(30 * time.Minute)
	block := map[string]NodeSignals{"n0": {Instance: "i-0", At: map[Kind]time.Time{KindCapacityBlockEnd: now.Add(-20 * time.Minute)}, Ends: end}}
	v := DefaultRule().Assess(names, block, now)
	if !v.AtRisk || !v.Ends.Equal(end) || len(v.Signalled) != 1 {
		t.Errorf("one node of an ending block among 8: %+v", v)
	}
	rebalance := map[string]NodeSignals{"n0": {Instance: "i-0", At: map[Kind]time.Time{KindRebalance: now.Add(-time.Minute)}}}
	if v := DefaultRule().Assess(names, rebalance, now); v.AtRisk || !v.Ends.IsZero() {
		t.Errorf("one rebalance recommendation among 8: %+v", v)
	}
	if v := DefaultRule().Assess(names, block, end); v.AtRisk || len(v.Signalled) != 0 {
		t.Errorf("at the end: %+v", v)
	}
}
