//go:build e2e

package e2e

import (
	"context"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/promcheck"
)

// httpGet GETs url with client and returns the status and body.
func httpGet(ctx context.Context, t *testing.T, client *http.Client, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading the body: %v", url, err)
	}
	return resp.StatusCode, string(body)
}

// The ports of controller-runtime projects: /metrics on the metrics port (plain HTTP)
// with client-go's REST metrics and build_info, the probes on the health port, and the
// HTTPS port serving neither.
func TestPorts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := env.webhook
	plain := &http.Client{Timeout: 10 * time.Second}
	ms, err := w.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"rest_client_requests_total", "rest_client_request_duration_seconds",
		"custom_kube_scheduler_webhook_build_info", "custom_kube_scheduler_webhook_certificate_expiry_timestamp_seconds",
		"go_goroutines", "process_resident_memory_bytes"} {
		if ms[name] == nil {
			t.Errorf("%s lacks %s", w.MetricsURL("/metrics"), name)
		}
	}
	// The webhook has listed and watched through its clients by now.
	if got := ms.Sum("rest_client_requests_total", map[string]string{"method": "GET", "code": "200"}); got == 0 {
		t.Error("rest_client_requests_total{method=GET,code=200} is 0 after the caches synced")
	}
	if got := ms.Sum("custom_kube_scheduler_webhook_certificate_expiry_timestamp_seconds", nil); got < float64(time.Now().Unix()) {
		t.Errorf("certificate expiry %v is not in the future", got)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if status, body := httpGet(ctx, t, plain, w.HealthURL(path)); status != http.StatusOK {
			t.Errorf("%s: %d %q", w.HealthURL(path), status, body)
		}
	}
	https := env.hc.HTTPClient(10 * time.Second)
	defer https.CloseIdleConnections()
	for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
		if status, _ := httpGet(ctx, t, https, w.URL(path)); status != http.StatusNotFound {
			t.Errorf("%s answers %d, want 404: the HTTPS port serves only admission and peers", w.URL(path), status)
		}
	}
	if status, body := httpGet(ctx, t, plain, w.MetricsURL("/metrics")); status != http.StatusOK || !strings.Contains(body, "# TYPE rest_client_requests_total counter") {
		t.Errorf("%s: %d, rest_client_requests_total typed a counter: %v", w.MetricsURL("/metrics"), status, strings.Contains(body, "# TYPE rest_client_requests_total counter"))
	}
}

// liveOnly are the metrics a live scrape of the suite's webhook may lack: every label
// of theirs is a term, so they have a series only once a term was placed on, found
// unserved or unavailable, or (term_pods, term_target_pods) once the convergence loop
// ran a pass with a workload; the node-group ones exist only with EKS_CLUSTER_NAME, the
// cost ones only with COST_METRICS=on (off in the suite: it needs prices). The unit
// test (cmd/custom-kube-scheduler-webhook, TestMonitoringUsesOnlyExportedMetrics)
// finds them in serve's registry.
var liveOnly = map[string]bool{
	"custom_kube_scheduler_webhook_placements_total":                                 true,
	"custom_kube_scheduler_webhook_unserved_terms_total":                             true,
	"custom_kube_scheduler_webhook_terms_unavailable":                                true,
	"custom_kube_scheduler_webhook_terms_unserved":                                   true,
	"custom_kube_scheduler_webhook_terms_marked_unavailable_total":                   true,
	"custom_kube_scheduler_webhook_terms_kept_launching_total":                       true,
	"custom_kube_scheduler_webhook_term_target_pods":                                 true,
	"custom_kube_scheduler_webhook_term_pods":                                        true,
	"custom_kube_scheduler_webhook_nodegroups":                                       true,
	"custom_kube_scheduler_webhook_nodegroup_refresh_failing":                        true,
	"custom_kube_scheduler_webhook_nodegroup_refresh_last_success_timestamp_seconds": true,
	"custom_kube_scheduler_webhook_cost_pods":                                        true,
	"custom_kube_scheduler_webhook_cost_usd_per_hour":                                true,
	"custom_kube_scheduler_webhook_cost_on_demand_usd_per_hour":                      true,
	"custom_kube_scheduler_webhook_cost_saving_usd_per_hour":                         true,
	"custom_kube_scheduler_webhook_cost_unpriced_nodes":                              true,
	"custom_kube_scheduler_webhook_cost_idle_reserved_pods":                          true,
}

// monitoringQueries reads the chart's alert rules and, when present, its dashboard.
func monitoringQueries(t *testing.T) []promcheck.Query {
	t.Helper()
	files := filepath.Join(env.repo, "deploy", "chart", "custom-kube-scheduler-webhook", "files")
	// files/alerts.yaml is a template; deploy/render.sh renders it with the defaults.
	rules, err := os.ReadFile(filepath.Join(env.repo, "deploy", "manifests", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	queries, err := promcheck.RuleQueries(rules)
	if err != nil {
		t.Fatal(err)
	}
	if dash, err := os.ReadFile(filepath.Join(files, "dashboard.json")); err == nil {
		dq, err := promcheck.DashboardQueries(dash)
		if err != nil {
			t.Fatal(err)
		}
		queries = append(queries, dq...)
	} else if !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return queries
}

// The alert rules and the dashboard use only metrics a running serve exports, by a
// live scrape: they cannot drift from the code.
func TestMonitoringMatchesLiveScrape(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ms, err := env.webhook.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	exported := promcheck.Exported(slices.Collect(maps.Values(map[string]*dto.MetricFamily(ms))))
	if err := promcheck.Unexported(monitoringQueries(t), exported, liveOnly); err != nil {
		t.Errorf("against a scrape of %s:\n%v", env.webhook.MetricsURL("/metrics"), err)
	}
}
