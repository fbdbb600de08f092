package report_test

import (
	"context"
	"testing"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/rest"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/pricing"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/report"
)

// serve's refresher: none with COST_METRICS=off, an error without the caches, and the
// price file of COST_PRICES_FILE as the source of every refresh.
func TestNewCostRefresherFromSettings(t *testing.T) {
	restCfg, log := &rest.Config{Host: "https://127.0.0.1:1"}, logrus.New()
	views := report.Views{Caches: &clusterview.Caches{}, Synced: make(chan struct{})}
	if c, err := report.NewCostRefresher(report.CostSettings{}, restCfg, views, report.NewCostMetrics("x"), log); c != nil || err != nil {
		t.Fatalf("off: %v, %v; want nothing", c, err)
	}
	if _, err := report.NewCostRefresher(report.CostSettings{Enabled: true}, restCfg, report.Views{}, report.NewCostMetrics("x"), log); err == nil {
		t.Fatal("without the caches: no error")
	}
	table := &pricing.Table{}
	c, err := report.NewCostRefresher(report.CostSettings{Enabled: true, Prices: table}, restCfg, views, report.NewCostMetrics("x"), log)
	if err != nil || c == nil || c.Skip == nil || c.Skip("any") {
		t.Fatalf("on: %+v, %v; want a refresher that skips nothing", c, err)
	}
	if src, err := c.Prices(context.Background()); err != nil || src != pricing.Source(table) {
		t.Fatalf("price source %v, %v: want the price file's table", src, err)
	}
}
