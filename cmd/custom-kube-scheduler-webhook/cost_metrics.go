package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/pricing"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/report"
)

// unknownCapacity labels pods on nodes that carry no capacity-type label.
const unknownCapacity = "unknown"

// costRow is one workload term's realized cost, as the last refresh found it.
type costRow struct {
	namespace, workload, term string
	// pods counts the term's pods on nodes, by the nodes' capacity type.
	pods     map[string]int
	cost     report.Cost
	unpriced int
}

// costMetrics exports the realized cost per workload and term. It holds the last
// refresh's rows and yields them at each scrape: a workload absent from the last
// refresh (deleted, its strategy removed) has no series any more, and a scrape never
// sees a refresh half done. Empty until the first refresh, so a replica that does not
// refresh (COST_METRICS=off, not elected) exports none of it.
type costMetrics struct {
	pods, usd, onDemand, saving, unpriced, refreshed, failures *prometheus.Desc

	mu        sync.Mutex
	rows      []costRow
	lastOK    time.Time
	failCount float64
}

// newCostMetrics describes the cost series under namespace (webhook.MetricsNamespace).
func newCostMetrics(namespace string) *costMetrics {
	// Not "namespace": Prometheus gives a target's series the namespace of the pod it
	// scrapes (the webhook's), renaming ours exported_namespace, and the dashboard and
	// alerts select the webhook's namespace by that label.
	term := []string{"workload_namespace", "workload", "term"}
	name := func(n string) string { return prometheus.BuildFQName(namespace, "cost", n) }
	return &costMetrics{
		pods: prometheus.NewDesc(name("pods"),
			"Pods of a workload's term on nodes, by the nodes' capacity type (on-demand, spot, unknown); COST_METRICS=on.",
			append(term, "capacity_type"), nil),
		usd: prometheus.NewDesc(name("usd_per_hour"),
			"Hourly cost in USD of a workload's term: each node's price times the share of it the term's pods request.", term, nil),
		onDemand: prometheus.NewDesc(name("on_demand_usd_per_hour"),
			"What the term's pods would cost per hour on the same instance types bought on-demand.", term, nil),
		saving: prometheus.NewDesc(name("saving_usd_per_hour"),
			"on_demand_usd_per_hour minus usd_per_hour: the hourly saving against all on-demand.", term, nil),
		unpriced: prometheus.NewDesc(name("unpriced_nodes"),
			"Nodes of the term's pods that had no price (left out of the cost); the log says why.", term, nil),
		refreshed: prometheus.NewDesc(name("refresh_timestamp_seconds"),
			"Unix time of the last successful cost refresh.", nil, nil),
		failures: prometheus.NewDesc(name("refresh_failures_total"),
			"Cost refreshes that failed (the workloads or prices could not be read); the series keep the last good values.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (m *costMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.pods, m.usd, m.onDemand, m.saving, m.unpriced, m.refreshed, m.failures} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *costMetrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lastOK.IsZero() && m.failCount == 0 {
		return
	}
	ch <- prometheus.MustNewConstMetric(m.failures, prometheus.CounterValue, m.failCount)
	if m.lastOK.IsZero() {
		return
	}
	ch <- prometheus.MustNewConstMetric(m.refreshed, prometheus.GaugeValue, float64(m.lastOK.Unix()))
	for _, r := range m.rows {
		labels := []string{r.namespace, r.workload, r.term}
		for capacity, n := range r.pods {
			ch <- prometheus.MustNewConstMetric(m.pods, prometheus.GaugeValue, float64(n), append(labels, capacity)...)
		}
		ch <- prometheus.MustNewConstMetric(m.usd, prometheus.GaugeValue, r.cost.USDPerHour, labels...)
		ch <- prometheus.MustNewConstMetric(m.onDemand, prometheus.GaugeValue, r.cost.OnDemandUSDPerHour, labels...)
		ch <- prometheus.MustNewConstMetric(m.saving, prometheus.GaugeValue, r.cost.SavingUSDPerHour, labels...)
		ch <- prometheus.MustNewConstMetric(m.unpriced, prometheus.GaugeValue, float64(r.unpriced), labels...)
	}
}

// set replaces the rows with a refresh's.
func (m *costMetrics) set(rows []costRow, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rows, m.lastOK = rows, at
}

// failed counts a refresh that failed; the last rows stay.
func (m *costMetrics) failed() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failCount++
}

// clear drops every series: a replica that stops refreshing (no longer elected) must
// not go on exporting costs that are no longer kept current.
func (m *costMetrics) clear() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rows, m.lastOK = nil, time.Time{}
}

// costRows turns a priced report into rows, leaving out the namespaces skip names.
func costRows(r report.Report, skip func(namespace string) bool) (rows []costRow, unpriced []string) {
	for _, w := range r.Workloads {
		if skip != nil && skip(w.Namespace) {
			continue
		}
		for _, t := range w.Terms {
			row := costRow{namespace: w.Namespace, workload: w.Kind + "/" + w.Name, term: strconv.Itoa(t.Term), pods: map[string]int{}}
			for _, n := range t.Nodes {
				capacity := pricing.NormalizeCapacityType(n.CapacityType)
				if capacity == "" {
					capacity = unknownCapacity
				}
				row.pods[capacity] += n.Pods
			}
			if t.Cost != nil {
				row.cost, row.unpriced = *t.Cost, len(t.Cost.Unpriced)
				for _, u := range t.Cost.Unpriced {
					unpriced = append(unpriced, fmt.Sprintf("%s/%s term %d: %s", w.Namespace, row.workload, t.Term, u))
				}
			}
			rows = append(rows, row)
		}
	}
	sort.Strings(unpriced)
	return rows, unpriced
}

// pricedPods counts the pods of rows whose nodes had a price.
func pricedPods(rows []costRow) int {
	n := 0
	for _, r := range rows {
		n += r.cost.PricedPods
	}
	return n
}

// costRefresher prices the workloads' terms every interval (COST_METRICS=on).
type costRefresher struct {
	// collect reads the workloads, their pods and the nodes (report.Collect in serve).
	collect func(ctx context.Context) (report.Report, error)
	// prices returns the price source for one refresh: a fresh one each time, since
	// pricing.AWS stays down after a failure that is not about one key.
	prices   func(ctx context.Context) (pricing.Source, error)
	skip     func(namespace string) bool
	metrics  *costMetrics
	interval time.Duration
	log      logrus.FieldLogger
	now      func() time.Time
}

// refresh prices every workload once and replaces the series.
func (c *costRefresher) refresh(ctx context.Context) error {
	r, err := c.collect(ctx)
	if err != nil {
		return fmt.Errorf("read the workloads: %w", err)
	}
	prices, err := c.prices(ctx)
	if err != nil {
		return fmt.Errorf("price source: %w", err)
	}
	report.AddCost(ctx, &r, prices)
	rows, unpriced := costRows(r, c.skip)
	if len(unpriced) > 0 && pricedPods(rows) == 0 {
		// Nothing priced at all is the price source failing (AWS unreachable, no
		// credentials), not a cluster that costs nothing: keep the last good values.
		return fmt.Errorf("no node could be priced (%d left out), first: %s", len(unpriced), unpriced[0])
	}
	c.metrics.set(rows, c.now())
	if len(unpriced) > 0 {
		// One line per refresh: a hundred nodes of an unknown type are one problem.
		c.log.WithFields(logrus.Fields{"unpriced": len(unpriced), "first": unpriced[0]}).Warn("nodes without a price are left out of the cost metrics")
	}
	return nil
}

// run refreshes at once and then every interval until ctx ends, then drops the series.
func (c *costRefresher) run(ctx context.Context) {
	defer c.metrics.clear()
	tick := time.NewTicker(c.interval)
	defer tick.Stop()
	for {
		if err := c.refresh(ctx); err != nil && ctx.Err() == nil {
			c.metrics.failed()
			c.log.WithError(err).Error("cost metrics not refreshed")
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// costPriceSource is serve's price source: the price file (COST_PRICES_FILE, loaded
// at startup) or AWS behind a disk cache in the temporary directory (a cache that
// cannot be written is no error: DiskCache then just asks AWS).
func costPriceSource(table *pricing.Table) func(ctx context.Context) (pricing.Source, error) {
	if table != nil {
		return func(context.Context) (pricing.Source, error) { return table, nil }
	}
	cachePath := filepath.Join(os.TempDir(), component, "prices.json")
	return func(ctx context.Context) (pricing.Source, error) {
		aws, err := pricing.NewAWS(ctx, pricing.AWSOptions{})
		if err != nil {
			return nil, err
		}
		return pricing.NewDiskCache(aws, cachePath, pricing.DefaultTTL), nil
	}
}
