package report

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/pricing"
)

// unknownCapacity labels pods on nodes that carry no capacity-type label.
const unknownCapacity = "unknown"

// costRow is one workload term's realized cost, as the last refresh found it.
type costRow struct {
	namespace, workload, term string
	// pods counts the term's pods on nodes, by the nodes' capacity type.
	pods     map[string]int
	cost     Cost
	unpriced int
	// idleReserved is TermReport.IdleReserved's Pods (0: none).
	idleReserved int
}

// CostMetrics is the Prometheus collector of the realized cost per workload and term
// (serve's COST_METRICS). It holds the last refresh's rows and yields them at each
// scrape: a workload absent from the last refresh (deleted, its strategy removed) has
// no series any more, and a scrape never sees a refresh half done. Empty until the
// first refresh, so a replica that does not refresh (COST_METRICS=off, not elected)
// exports none of it.
type CostMetrics struct {
	pods, usd, onDemand, saving, unpriced, idleReserved, refreshed, failures *prometheus.Desc

	mu        sync.Mutex
	rows      []costRow
	lastOK    time.Time
	failCount float64
}

// NewCostMetrics describes the cost series under namespace (serve passes
// webhook.MetricsNamespace). Register it on a registry; a CostRefresher fills it.
func NewCostMetrics(namespace string) *CostMetrics {
	// Not "namespace": Prometheus gives a target's series the namespace of the pod it
	// scrapes (the webhook's), renaming ours exported_namespace, and the dashboard and
	// alerts select the webhook's namespace by that label.
	term := []string{"workload_namespace", "workload", "term"}
	name := func(n string) string { return prometheus.BuildFQName(namespace, "cost", n) }
	return &CostMetrics{
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
		idleReserved: prometheus.NewDesc(name("idle_reserved_pods"),
			"How many more of the term's pods fit in room left on reserved nodes (capacity reservations, Capacity Blocks) while some of them run on on-demand nodes; 0 otherwise.", term, nil),
		refreshed: prometheus.NewDesc(name("refresh_timestamp_seconds"),
			"Unix time of the last successful cost refresh.", nil, nil),
		failures: prometheus.NewDesc(name("refresh_failures_total"),
			"Cost refreshes that failed (the workloads or prices could not be read); the series keep the last good values.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (m *CostMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.pods, m.usd, m.onDemand, m.saving, m.unpriced, m.idleReserved, m.refreshed, m.failures} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *CostMetrics) Collect(ch chan<- prometheus.Metric) {
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
		ch <- prometheus.MustNewConstMetric(m.idleReserved, prometheus.GaugeValue, float64(r.idleReserved), labels...)
	}
}

// set replaces the rows with a refresh's.
func (m *CostMetrics) set(rows []costRow, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rows, m.lastOK = rows, at
}

// failed counts a refresh that failed; the last rows stay.
func (m *CostMetrics) failed() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failCount++
}

// clear drops every series: a replica that stops refreshing (no longer elected) must
// not go on exporting costs that are no longer kept current.
func (m *CostMetrics) clear() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rows, m.lastOK = nil, time.Time{}
}

// costRows turns a priced report into rows, leaving out the namespaces skip names.
func costRows(r Report, skip func(namespace string) bool) (rows []costRow, unpriced []string) {
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
			if t.IdleReserved != nil {
				row.idleReserved = t.IdleReserved.Pods
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

// CostRefresher prices the workloads' terms every Interval and sets a CostMetrics'
// series (serve's COST_METRICS=on, on the elected replica). Every field but Skip must
// be set.
type CostRefresher struct {
	// Collect reads the workloads, their pods and the nodes (Collect in serve).
	Collect func(ctx context.Context) (Report, error)
	// Prices returns the price source for one refresh: a fresh one each time, since
	// pricing.AWS stays down after a failure that is not about one key.
	Prices func(ctx context.Context) (pricing.Source, error)
	// Skip names the namespaces left out of the series (nil: none).
	Skip    func(namespace string) bool
	Metrics *CostMetrics
	// Interval between refreshes; DefaultCostInterval when zero.
	Interval time.Duration
	Log      logrus.FieldLogger
	Now      func() time.Time
}

// Refresh prices every workload once and replaces the series.
func (c *CostRefresher) Refresh(ctx context.Context) error {
	r, err := c.Collect(ctx)
	if err != nil {
		return fmt.Errorf("read the workloads: %w", err)
	}
	prices, err := c.Prices(ctx)
	if err != nil {
		return fmt.Errorf("price source: %w", err)
	}
	AddCost(ctx, &r, prices)
	rows, unpriced := costRows(r, c.Skip)
	if len(unpriced) > 0 && pricedPods(rows) == 0 {
		// Nothing priced at all is the price source failing (AWS unreachable, no
		// credentials), not a cluster that costs nothing: keep the last good values.
		return fmt.Errorf("no node could be priced (%d left out), first: %s", len(unpriced), unpriced[0])
	}
	c.Metrics.set(rows, c.Now())
	if len(unpriced) > 0 {
		// One line per refresh: a hundred nodes of an unknown type are one problem.
		c.Log.WithFields(logrus.Fields{"unpriced": len(unpriced), "first": unpriced[0]}).Warn("nodes without a price are left out of the cost metrics")
	}
	return nil
}

// DefaultCostInterval is the refresh interval when CostRefresher.Interval is zero:
// prices and placements change over hours, and a refresh reads every placed pod.
const DefaultCostInterval = 5 * time.Minute

// Run refreshes at once and then every Interval until ctx ends, then drops the series.
func (c *CostRefresher) Run(ctx context.Context) {
	defer c.Metrics.clear()
	interval := c.Interval
	if interval <= 0 {
		interval = DefaultCostInterval
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if err := c.Refresh(ctx); err != nil && ctx.Err() == nil {
			c.Metrics.failed()
			c.Log.WithError(err).Error("cost metrics not refreshed")
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
