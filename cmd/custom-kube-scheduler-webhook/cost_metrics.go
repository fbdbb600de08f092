package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/policy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/pricing"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/report"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/unavailability"
)

// costPriceSource is serve's price source: the price file (COST_PRICES_FILE, loaded
// at startup) or AWS behind a disk cache in the temporary directory (a cache that
// cannot be written is no error: DiskCache then just asks AWS).
func costPriceSource(table *pricing.Table) func(ctx context.Context) (pricing.Source, error) {
	if table != nil {
		return func(context.Context) (pricing.Source, error) { return table, nil }
	}
	return pricing.FreshAWS(filepath.Join(os.TempDir(), component, "prices.json"))
}

// costViews are what serve watches anyway, which the cost refresh reads instead of
// listing: placed pods and workloads (trimmed, in the caches), policies and the
// loop's unavailability records. Only the nodes are listed, page by page and trimmed
// (the caches' slim nodes carry no allocatable).
type costViews struct {
	caches   *clusterview.Caches
	policies *policy.Cache
	records  *unavailability.Records
	// synced closes once every view has synced: a refresh before would price a
	// cluster with pods missing.
	synced <-chan struct{}
	// skip names the namespaces left out (the blocklist, the webhook's own).
	skip func(namespace string) bool
}

// collect builds the cost report from the views. It holds the report's rows and one
// PlacedPod at a time, never a list of pods: at 100,000 placed pods listing them whole
// held 525 to 725 MiB for the refresh, over the chart's memory limit.
func (v costViews) collect(ctx context.Context, client kubernetes.Interface) (report.Report, error) {
	select {
	case <-v.synced:
	case <-ctx.Done():
		return report.Report{}, fmt.Errorf("wait for the caches: %w", ctx.Err())
	}
	nodes, err := report.ReadNodes(ctx, client)
	if err != nil {
		return report.Report{}, err
	}
	st, err := v.state(nodes, time.Now())
	if err != nil {
		return report.Report{}, err
	}
	return report.Build(st, func(string, string) bool { return true }), nil
}

// state is the report's State read from the views (shallow copies of the trimmed
// workloads: the cache's objects are shared and never changed).
func (v costViews) state(nodes map[string]*corev1.Node, now time.Time) (*report.State, error) {
	st := &report.State{Nodes: nodes, Policies: v.policies, PodsOf: v.podsOf}
	if v.records != nil {
		st.Unavailable = func(uid types.UID) map[int]unavailability.TermState { return v.records.Get(uid).Active(now) }
	}
	objs, err := v.caches.Objects(v.skip)
	if err != nil {
		return nil, err
	}
	st.Deployments, st.StatefulSets, st.ReplicaSets, st.Rollouts = values(objs.Deployments), values(objs.StatefulSets), values(objs.ReplicaSets), values(objs.Rollouts)
	st.Jobs, st.CronJobs = values(objs.Jobs), values(objs.CronJobs)
	return st, nil
}

// podsOf gives the report the cached placed pods of one revision, one at a time, on
// a term of s; it allocates nothing per pod.
func (v costViews) podsOf(namespace string, owner types.UID, s *strategy.Strategy, fn func(report.Pod)) {
	v.caches.EachPodOf(clusterview.Revision{Namespace: namespace, UID: owner}, func(p clusterview.PlacedPod) {
		term := -1
		if s != nil && p.Placed() {
			term = p.TermIn(s)
		}
		fn(report.Pod{
			Name: p.Name, Seat: p.Seat, FallbackFrom: p.FallbackFrom, TermIndex: term,
			HoldsSeat: p.HoldsSeat(), DoNotDisrupt: p.DoNotDisrupt, Phase: p.Phase, PendingReason: p.Unschedulable, NodeName: p.NodeName,
			CPUMilli: p.CPUMilli, MemoryBytes: p.MemoryBytes,
		})
	})
}

// newServeCostRefresher is the cost refresher of COST_METRICS=on (nil when off). It
// prices what views hold; its one list, the nodes', goes through a client of its own,
// at a low rate and with its own user agent, so that it neither slows admission's
// client nor hides among its requests.
func newServeCostRefresher(settings costSettings, restCfg *rest.Config, views costViews, costs *report.CostMetrics, log *logrus.Logger) (*report.CostRefresher, error) {
	if !settings.Enabled {
		return nil, nil
	}
	if views.caches == nil || views.synced == nil {
		return nil, errors.New("cost metrics: the caches are required")
	}
	costCfg := rest.CopyConfig(restCfg)
	costCfg.QPS, costCfg.Burst = 5, 10
	costCfg.UserAgent = restCfg.UserAgent + "/cost"
	client, err := kubernetes.NewForConfig(costCfg)
	if err != nil {
		return nil, fmt.Errorf("create the cost metrics' client: %w", err)
	}
	if views.skip == nil {
		views.skip = func(string) bool { return false }
	}
	return &report.CostRefresher{
		Collect: func(ctx context.Context) (report.Report, error) { return views.collect(ctx, client) },
		Prices:  costPriceSource(settings.Prices),
		Skip:    views.skip,
		Metrics: costs,
		Log:     log.WithField("component", "cost"),
		Now:     time.Now,
	}, nil
}

// values copies the objects of a cache's list (shallow: the cache's are never changed).
func values[T any](list []*T) []T {
	out := make([]T, len(list))
	for i, o := range list {
		out[i] = *o
	}
	return out
}
