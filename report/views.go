package report

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
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/unavailability"
)

// Views are what serve watches anyway, which its cost refresh reads instead of
// listing: placed pods and workloads (trimmed, in the caches), policies and the
// loop's unavailability records. Only the nodes are listed, page by page and trimmed
// (the caches' slim nodes carry no allocatable).
type Views struct {
	Caches   *clusterview.Caches
	Policies *policy.Cache
	// Records are the loop's unavailability records (nil: none).
	Records *unavailability.Records
	// Synced closes once every view has synced: a refresh before would price a
	// cluster with pods missing.
	Synced <-chan struct{}
	// Skip names the namespaces left out (the blocklist, the webhook's own; nil: none).
	Skip func(namespace string) bool
	// OnDemandAcceptsReserved is the webhook's ON_DEMAND_ACCEPTS_RESERVED (State's).
	OnDemandAcceptsReserved bool
}

// CostSettings are the cost metrics' knobs a user turns (COST_METRICS,
// COST_PRICES_FILE): serve reads them and hands them to NewCostRefresher.
type CostSettings struct {
	Enabled bool
	// Prices is the price file read at startup (nil: AWS).
	Prices *pricing.Table
}

// NewCostRefresher is serve's cost refresher (nil with the settings off). It prices
// what views hold; its one list, the nodes', goes through a client of its own, at a low
// rate and with its own user agent, so that it neither slows admission's client nor
// hides among its requests.
func NewCostRefresher(s CostSettings, restCfg *rest.Config, views Views, metrics *CostMetrics, log logrus.FieldLogger) (*CostRefresher, error) {
	if !s.Enabled {
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
	return &CostRefresher{
		Collect: func(ctx context.Context) (Report, error) { return views.Collect(ctx, client) },
		// A price file (COST_PRICES_FILE, loaded at startup), or AWS behind a disk cache
		// in the temporary directory.
		Prices:  pricing.FreshAWS(s.Prices, filepath.Join(os.TempDir(), "custom-kube-scheduler-webhook", "prices.json")),
		Skip:    views.Skip,
		Metrics: metrics,
		Log:     log.WithField("component", "cost"),
		Now:     time.Now,
	}, nil
}

// Collect builds the cost report from the views. It holds the report's rows and one
// PlacedPod at a time, never a list of pods: at 100,000 placed pods listing them whole
// held 525 to 725 MiB for the refresh, over the chart's memory limit.
func (v Views) Collect(ctx context.Context, client kubernetes.Interface) (Report, error) {
	select {
	case <-v.Synced:
	case <-ctx.Done():
		return Report{}, fmt.Errorf("wait for the caches: %w", ctx.Err())
	}
	nodes, err := ReadNodes(ctx, client)
	if err != nil {
		return Report{}, err
	}
	st, err := v.state(nodes, time.Now())
	if err != nil {
		return Report{}, err
	}
	if st.Used, err = ReadReservedUse(ctx, client, nodes); err != nil {
		return Report{}, err
	}
	return Build(st, func(string, string) bool { return true }), nil
}

// state is the report's State read from the views (shallow copies of the trimmed
// workloads: the cache's objects are shared and never changed).
func (v Views) state(nodes map[string]*corev1.Node, now time.Time) (*State, error) {
	st := &State{Nodes: nodes, Policies: v.Policies, PodsOf: v.podsOf, OnDemandAcceptsReserved: v.OnDemandAcceptsReserved}
	if v.Records != nil {
		st.Unavailable = func(uid types.UID) map[int]unavailability.TermState { return v.Records.Get(uid).Active(now) }
	}
	objs, err := v.Caches.Objects(v.Skip)
	if err != nil {
		return nil, err
	}
	st.Deployments, st.StatefulSets, st.ReplicaSets, st.Rollouts = values(objs.Deployments), values(objs.StatefulSets), values(objs.ReplicaSets), values(objs.Rollouts)
	st.Jobs, st.CronJobs = values(objs.Jobs), values(objs.CronJobs)
	return st, nil
}

// podsOf gives the report the cached placed pods of one revision, one at a time, on
// a term of s; it allocates nothing per pod.
func (v Views) podsOf(namespace string, owner types.UID, s *strategy.Strategy, fn func(Pod)) {
	v.Caches.EachPodOf(clusterview.Revision{Namespace: namespace, UID: owner}, func(p clusterview.PlacedPod) {
		term := -1
		if s != nil && p.Placed() {
			term = p.TermIn(s)
		}
		fn(Pod{
			Name: p.Name, Seat: p.Seat, FallbackFrom: p.FallbackFrom, TermIndex: term,
			HoldsSeat: p.HoldsSeat(), DoNotDisrupt: p.DoNotDisrupt, Phase: p.Phase, PendingReason: p.Unschedulable, NodeName: p.NodeName,
			CPUMilli: p.CPUMilli, MemoryBytes: p.MemoryBytes,
		})
	})
}

// values copies the objects of a cache's list (shallow: the cache's are never changed).
func values[T any](list []*T) []T {
	out := make([]T, len(list))
	for i, o := range list {
		out[i] = *o
	}
	return out
}
