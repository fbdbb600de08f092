package nodegroups

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestNodeGroupMetrics(t *testing.T) {
	status := Status{Groups: 3, LastSuccess: time.Unix(1700000000, 0)}
	reg := prometheus.NewRegistry()
	if err := RegisterMetrics(reg, "custom_kube_scheduler_webhook", func() Status { return status }); err != nil {
		t.Fatal(err)
	}
	expect := func(failing int) string {
		return fmt.Sprintf(`
# HELP custom_kube_scheduler_webhook_nodegroup_refresh_failing 1 while the last node-group refresh failed (the previous view is kept), else 0.
# TYPE custom_kube_scheduler_webhook_nodegroup_refresh_failing gauge
custom_kube_scheduler_webhook_nodegroup_refresh_failing %d
# HELP custom_kube_scheduler_webhook_nodegroup_refresh_last_success_timestamp_seconds When the node-group view was last refreshed completely (Unix time; 0 = never).
# TYPE custom_kube_scheduler_webhook_nodegroup_refresh_last_success_timestamp_seconds gauge
custom_kube_scheduler_webhook_nodegroup_refresh_last_success_timestamp_seconds 1.7e+09
# HELP custom_kube_scheduler_webhook_nodegroups EKS managed node groups in the current view.
# TYPE custom_kube_scheduler_webhook_nodegroups gauge
custom_kube_scheduler_webhook_nodegroups 3
`, failing)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(expect(0))); err != nil {
		t.Fatal(err)
	}
	// A failed refresh keeps the view (3 groups) but says so.
	status.LastError = errors.New("ThrottlingException")
	if err := testutil.GatherAndCompare(reg, strings.NewReader(expect(1))); err != nil {
		t.Fatal(err)
	}
}
