package converge

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
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

// The loop judges each revision as spread does: all 5 pods on on-demand while spot
// should hold 4 is off target; with spot served by nothing, that term is counted in
// terms_unserved (its alert), and exactly placed pods on it read "fallback", not exact.
func TestWorkloadStatesAndUnservedTerms(t *testing.T) {
	const od, spot = "karpenter.sh/capacity-type=on-demand", "karpenter.sh/capacity-type=spot"
	w := newWorld(t, 5, fallbackPods(5))
	m := w.loop.cfg.Metrics
	w.loop.Pass(context.Background())
	if got := testutil.ToFloat64(m.states.WithLabelValues("off-target")); got != 1 {
		t.Errorf("workload_revisions{state=off-target} = %v, want 1", got)
	}
	if n := testutil.CollectAndCount(m.unserved); n != 0 {
		t.Errorf("%d terms_unserved series without Served, want 0", n)
	}

	w = newWorld(t, 5, []*corev1.Pod{pod(1, 0, "on-demand", true, 0), pod(2, 1, "spot", true, 0), pod(3, 1, "spot", true, 0), pod(4, 1, "spot", true, 0), pod(5, 1, "spot", true, 0)})
	w.loop.cfg.Served = func(labels map[string]string) bool { return labels["karpenter.sh/capacity-type"] != "spot" }
	m = w.loop.cfg.Metrics
	w.loop.Pass(context.Background())
	if got := testutil.ToFloat64(m.unserved.WithLabelValues(spot)); got != 1 {
		t.Errorf("terms_unserved{term=%s} = %v, want 1", spot, got)
	}
	if got := testutil.ToFloat64(m.unserved.WithLabelValues(od)); got != 0 {
		t.Errorf("terms_unserved{term=%s} = %v, want 0", od, got)
	}
	if exact, fallback := testutil.ToFloat64(m.states.WithLabelValues("exact")), testutil.ToFloat64(m.states.WithLabelValues("fallback")); exact != 0 || fallback != 1 {
		t.Errorf("workload_revisions exact %v fallback %v, want 0 and 1", exact, fallback)
	}
}
