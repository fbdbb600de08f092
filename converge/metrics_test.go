package converge

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// After a pass, term_target_pods and term_pods show per term what the revisions should
// have there and what they have: here 1 on-demand and 4 spot wanted, all 5 on
// on-demand (the fallback pods of a spot cool-down, about to move back).
func TestTermTargetAndPods(t *testing.T) {
	w := newWorld(t, 5, fallbackPods(5))
	w.loop.Pass(context.Background())
	m := w.loop.cfg.Metrics
	const od, spot = "karpenter.sh/capacity-type=on-demand", "karpenter.sh/capacity-type=spot"
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"term_target_pods on-demand", testutil.ToFloat64(m.termTarget.WithLabelValues(od)), 1},
		{"term_target_pods spot", testutil.ToFloat64(m.termTarget.WithLabelValues(spot)), 4},
		{"term_pods on-demand", testutil.ToFloat64(m.termPods.WithLabelValues(od)), 5},
		{"term_pods spot", testutil.ToFloat64(m.termPods.WithLabelValues(spot)), 0},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}
