package webhook

import (
	"regexp"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Admission outcomes, the values of the "outcome" label.
const (
	OutcomePlaced   = "placed"   // pod patched onto a term
	OutcomeSkipped  = "skipped"  // not ours to place (no strategy, blocklisted, UPDATE, ...)
	OutcomeInvalid  = "invalid"  // the strategy does not parse; pod admitted unchanged
	OutcomeConflict = "conflict" // the pod's nodeSelector contradicts the term; unchanged
	OutcomeError    = "error"    // an internal fault; pod admitted unchanged
	OutcomeDeadline = "deadline" // the admission deadline passed; pod admitted unchanged
	OutcomeAllowed  = "allowed"  // workload validation passed
	OutcomeDenied   = "denied"   // workload validation rejected the object
)

// Outcomes of the architecture step, the values of architecture_decisions_total's
// "outcome" label.
const (
	ArchRequired  = "required"   // a kubernetes.io/arch requirement was added
	ArchUnneeded  = "unneeded"   // the images run on every architecture the term offers
	ArchSkipped   = "skipped"    // nothing to decide: the pod pins the architecture, or the term offers one
	ArchUnknown   = "unknown"    // the images' architectures could not be read in time; placed without
	ArchCannotRun = "cannot_run" // the term offers no architecture the images support
)

// Metrics are the webhook's Prometheus metrics, registered on their own registry (no
// global state), which also carries the Go and process collectors.
type Metrics struct {
	Registry   *prometheus.Registry
	admissions *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	placements *prometheus.CounterVec
	unserved   *prometheus.CounterVec
	refused    *prometheus.CounterVec
	// architectures counts the architecture step's outcomes (placement's arch.go).
	architectures *prometheus.CounterVec
	// collectors are what NewMetrics registered, for Describe.
	collectors []prometheus.Collector
}

// MetricsNamespace prefixes every metric of the product (webhook, convergence loop,
// node groups).
const MetricsNamespace = "custom_kube_scheduler_webhook"

// NewMetrics creates and registers the metrics.
func NewMetrics() *Metrics {
	const ns = MetricsNamespace
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		admissions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "admissions_total",
			Help: "Admission requests handled, by webhook (mutate, validate) and outcome.",
		}, []string{"webhook", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: "admission_duration_seconds",
			Help: "Time to answer an admission request, by webhook.",
			// Up to the chart's timeoutSeconds (5), so that a p99 near it can be seen.
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 4, 5},
		}, []string{"webhook"}),
		placements: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "placements_total",
			Help: "Pods placed, by the node labels of the term they were placed on and where the strategy came from (annotation, PlacementPolicy, ClusterPlacementPolicy, Namespace).",
		}, []string{"term", "source"}),
		unserved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "unserved_terms_total",
			Help: "Placements onto a term that no NodePool, node group or Ready node serves.",
		}, []string{"term"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "admissions_refused_total",
			Help: "Admission requests refused before they were read, by webhook and HTTP status (404: a path without the admission token, a review not sent by the API server; 413: body over the cap; 429: no room in flight in time).",
		}, []string{"webhook", "status"}),
		architectures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "architecture_decisions_total",
			Help: "Placed pods by what the image architecture step decided: required (a kubernetes.io/arch requirement added), unneeded (the images run on every architecture the term offers), skipped (the pod pins its architecture, or the term offers one), unknown (the images' architectures not known in time: placed without), cannot_run (the term offers no architecture the images support).",
		}, []string{"outcome"}),
	}
	m.collectors = []prometheus.Collector{m.admissions, m.latency, m.placements, m.unserved, m.refused, m.architectures,
		// Go's defaults, and go_gc_heap_live_bytes: the heap the last collection marked
		// live, what the heap comes back to (the GC's goal only bounds it from above).
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
			collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/gc/heap/live:bytes$`)})),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})}
	m.Registry.MustRegister(m.collectors...)
	// Every series with a known label set exists from the start, at 0: rates and
	// alerts see it before the first event, and a scrape shows every metric.
	for _, o := range []string{OutcomePlaced, OutcomeSkipped, OutcomeInvalid, OutcomeConflict, OutcomeError, OutcomeDeadline} {
		m.admissions.WithLabelValues("mutate", o)
	}
	for _, o := range []string{OutcomeAllowed, OutcomeDenied, OutcomeError} {
		m.admissions.WithLabelValues("validate", o)
	}
	for _, o := range []string{ArchRequired, ArchUnneeded, ArchSkipped, ArchUnknown, ArchCannotRun} {
		m.architectures.WithLabelValues(o)
	}
	for _, w := range []string{"mutate", "validate"} {
		m.latency.WithLabelValues(w)
		for _, status := range []string{"404", "413", "429"} {
			m.refused.WithLabelValues(w, status)
		}
	}
	return m
}

// Admitted counts one admission of hook ("mutate", "validate") with its outcome.
func (m *Metrics) Admitted(hook, outcome string) {
	m.admissions.WithLabelValues(hook, outcome).Inc()
}

// Placed counts one pod placed on term (its node labels) with a strategy from source.
func (m *Metrics) Placed(term, source string) { m.placements.WithLabelValues(term, source).Inc() }

// Unserved counts one placement onto term (its node labels), which nothing serves.
func (m *Metrics) Unserved(term string) { m.unserved.WithLabelValues(term).Inc() }

// Architecture counts one outcome (Arch...) of the image architecture step.
func (m *Metrics) Architecture(outcome string) { m.architectures.WithLabelValues(outcome).Inc() }

// Describe sends the descriptors of every metric NewMetrics registered, with series or
// not yet (a scrape shows a labelled metric only once it has one): the monitoring tests
// compare the dashboard and the alerts with them.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors {
		c.Describe(ch)
	}
}
