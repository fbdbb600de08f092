package main

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/karpenter/nodegroups"
)

// registerNodeGroupMetrics exposes how the EKS node-group view is doing: a failing
// refresh keeps the last good view, so without these an IAM or throttling problem
// would go unnoticed until a new group is missed.
func registerNodeGroupMetrics(reg prometheus.Registerer, status func() nodegroups.Status) error {
	const ns = "custom_kube_scheduler_webhook"
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
