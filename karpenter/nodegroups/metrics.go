package nodegroups

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// RegisterMetrics exposes how the node-group view is doing, with the metric names
// prefixed by ns: a failing refresh keeps the last good view, so without these
// an IAM or throttling problem would go unnoticed until a new group is missed.
func RegisterMetrics(reg prometheus.Registerer, ns string, status func() Status) error {
	gauges := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Name: "nodegroups",
			Help: "EKS managed node groups in the current view.",
		}, func() float64 { return float64(status().Groups) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Name: "nodegroup_refresh_last_success_timestamp_seconds",
			Help: "When the node-group view was last refreshed completely (Unix time; 0 = never).",
		}, func() float64 {
			if t := status().LastSuccess; !t.IsZero() {
				return float64(t.Unix())
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Name: "nodegroup_refresh_failing",
			Help: "1 while the last node-group refresh failed (the previous view is kept), else 0.",
		}, func() float64 {
			if status().LastError != nil {
				return 1
			}
			return 0
		}),
	}
	for _, g := range gauges {
		if err := reg.Register(g); err != nil {
			return fmt.Errorf("register node-group metrics: %w", err)
		}
	}
	return nil
}
