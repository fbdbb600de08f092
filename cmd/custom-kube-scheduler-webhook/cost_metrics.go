package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/pricing"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/report"
)

// newServeCostRefresher is the cost refresher of COST_METRICS=on (nil when off). It
// prices what views hold; its one list, the nodes', goes through a client of its own,
// at a low rate and with its own user agent, so that it neither slows admission's
// client nor hides among its requests.
func newServeCostRefresher(settings costSettings, restCfg *rest.Config, views report.Views, costs *report.CostMetrics, log *logrus.Logger) (*report.CostRefresher, error) {
	if !settings.Enabled {
		return nil, nil
	}
	if views.Caches == nil || views.Synced == nil {
		return nil, errors.New("cost metrics: the caches are required")
	}
	costCfg := rest.CopyConfig(restCfg)
	costCfg.QPS, costCfg.Burst = 5, 10
	costCfg.UserAgent = restCfg.UserAgent + "/cost"
	client, err := kubernetes.NewForConfig(costCfg)
	if err != nil {
		return nil, fmt.Errorf("create the cost metrics' client: %w", err)
	}
	if views.Skip == nil {
		views.Skip = func(string) bool { return false }
	}
	return &report.CostRefresher{
		Collect: func(ctx context.Context) (report.Report, error) { return views.Collect(ctx, client) },
		// A price file (COST_PRICES_FILE, loaded at startup), or AWS behind a disk cache
		// in the temporary directory.
		Prices:  pricing.FreshAWS(settings.Prices, filepath.Join(os.TempDir(), component, "prices.json")),
		Skip:    views.Skip,
		Metrics: costs,
		Log:     log.WithField("component", "cost"),
		Now:     time.Now,
	}, nil
}
