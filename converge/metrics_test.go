package converge

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/util/wait"
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
		{"term_target_pods on-demand", testutil.ToFloat64(m.termTarget.WithLabelValues(od, "annotation")), 1},
		{"term_target_pods spot", testutil.ToFloat64(m.termTarget.WithLabelValues(spot, "annotation")), 4},
		{"term_pods on-demand", testutil.ToFloat64(m.termPods.WithLabelValues(od, "annotation")), 5},
		{"term_pods spot", testutil.ToFloat64(m.termPods.WithLabelValues(spot, "annotation")), 0},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

// A replica that stops running the loop (leadership lost, shutdown) leaves no value
// of its own beside the new leader's: the alerts take the maximum over the replicas.
func TestLoopStopClearsItsGauges(t *testing.T) {
	w := newWorld(t, 5, fallbackPods(5))
	m := w.loop.cfg.Metrics
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.loop.Run(ctx, nil); close(done) }()
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return testutil.ToFloat64(m.fallback) == 4, nil
	}); err != nil {
		cancel()
		t.Fatalf("fallback_pods never reached 4: %v", testutil.ToFloat64(m.fallback))
	}
	cancel()
	<-done
	if v := testutil.ToFloat64(m.fallback) + testutil.ToFloat64(m.leader); v != 0 {
		t.Errorf("fallback_pods + converge_leader = %v after the loop stopped, want 0", v)
	}
	if n := testutil.CollectAndCount(m.termTarget) + testutil.CollectAndCount(m.termPods); n != 0 {
		t.Errorf("%d term series left after the loop stopped, want 0", n)
	}
}
