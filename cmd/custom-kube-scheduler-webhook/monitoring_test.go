package main

import (
	"crypto/tls"
	"errors"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/sirupsen/logrus"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/imagearch"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/clientmetrics"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/promcheck"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/karpenter/nodegroups"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/ledger"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/report"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook"
)

// The monitoring kit the chart ships: its alert rules and its Grafana dashboard.
const (
	alertsFile    = "../../deploy/manifests/alerts.yaml" // files/alerts.yaml rendered with the default values
	dashboardFile = "../../deploy/chart/custom-kube-scheduler-webhook/files/dashboard.json"
)

// recorder is a Registerer that remembers the series names of what it registers,
// including labelled metrics without a series yet.
type recorder struct {
	prometheus.Registerer
	names map[string]bool
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (r recorder) Register(c prometheus.Collector) error {
	typ := dto.MetricType_UNTYPED
	switch c.(type) {
	case prometheus.Histogram, *prometheus.HistogramVec:
		typ = dto.MetricType_HISTOGRAM
	case prometheus.Summary, *prometheus.SummaryVec:
		typ = dto.MetricType_SUMMARY
	}
	describe(c, func(name string) { promcheck.Add(r.names, name, typ) })
	return r.Registerer.Register(c)
}

// describe calls add with the name of every metric c describes.
func describe(c interface{ Describe(chan<- *prometheus.Desc) }, add func(string)) {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			add(m[1])
		}
	}
}

// serveExports builds the metrics the way serve does (webhook.NewMetrics, then
// registerMetrics, with EKS node groups on) and returns every series name they yield.
func serveExports(t *testing.T) map[string]bool {
	t.Helper()
	metrics := webhook.NewMetrics()
	seats, err := ledger.New(fake.NewClientset(), "ns", logrus.New(), ledger.Config{Identity: "test", Settings: ledger.Settings{ReservationTTL: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	rec := recorder{Registerer: metrics.Registry, names: map[string]bool{}}
	_, err = registerMetrics(rec, metricSources{
		REST: clientmetrics.New(), Ledger: seats,
		Certificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return nil, errors.New("none") },
		Ready:       func() error { return nil },
		NodeGroups:  func() nodegroups.Status { return nodegroups.Status{} },
		Cost:        report.NewCostMetrics(webhook.MetricsNamespace),
		Images:      imagearch.New(imagearch.Config{MetricsNamespace: webhook.MetricsNamespace}),
	})
	if err != nil {
		t.Fatal(err)
	}
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := promcheck.Exported(families) // with their types: a histogram's _bucket
	for n := range rec.names {
		names[n] = true
	}
	describe(metrics, func(name string) { names[name] = true })
	for _, must := range []string{"custom_kube_scheduler_webhook_build_info", "custom_kube_scheduler_webhook_placements_total",
		"custom_kube_scheduler_webhook_admission_duration_seconds_bucket", "rest_client_request_duration_seconds_bucket",
		"custom_kube_scheduler_webhook_terms_unavailable", "custom_kube_scheduler_webhook_cost_saving_usd_per_hour", "go_goroutines"} {
		if !names[must] {
			t.Fatalf("serve's registry as built here lacks %s: the test no longer builds it as serve does", must)
		}
	}
	return names
}

// Every metric the alert rules and the dashboard use is one serve exports: a renamed or
// removed metric fails here, not on an on-call engineer's screen.
func TestMonitoringUsesOnlyExportedMetrics(t *testing.T) {
	exported := serveExports(t)
	rules, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	queries, err := promcheck.RuleQueries(rules)
	if err != nil {
		t.Fatal(err)
	}
	if err := promcheck.Unexported(queries, exported, nil); err != nil {
		t.Errorf("%s:\n%v", alertsFile, err)
	}
	dashboard, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	panels, err := promcheck.DashboardQueries(dashboard)
	if err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if err := promcheck.Unexported(panels, exported, nil); err != nil {
		t.Errorf("%s:\n%v", dashboardFile, err)
	}
}

// The dashboard shows admissions, latency, fail-open, placement per term, fallback,
// evictions, the ledger and convergence: a query reads each one's metric.
func TestDashboardCoversEachConcern(t *testing.T) {
	dashboard, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	panels, err := promcheck.DashboardQueries(dashboard)
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	for _, q := range panels {
		names, err := promcheck.Metrics(q.Expr)
		if err != nil {
			t.Fatalf("%s: %v", q.Where, err)
		}
		for _, n := range names {
			used[n] = true
		}
	}
	const p = "custom_kube_scheduler_webhook_"
	for concern, metric := range map[string]string{
		"admissions": p + "admissions_total", "latency": p + "admission_duration_seconds_bucket",
		"fail-open": p + "admissions_refused_total", "placement per term": p + "placements_total",
		"against target": p + "term_target_pods",
		"fallback":       p + "terms_unavailable", "evictions": p + "converge_evictions_total",
		"ledger": p + "seat_claims_total", "convergence": p + "convergence_lag_seconds",
		"Kubernetes API":       "rest_client_request_duration_seconds_bucket",
		"savings vs on-demand": p + "cost_saving_usd_per_hour",
	} {
		if !used[metric] {
			t.Errorf("no panel of %s shows %s (%s)", dashboardFile, concern, metric)
		}
	}
}
