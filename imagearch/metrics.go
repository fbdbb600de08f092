package imagearch

import "github.com/prometheus/client_golang/prometheus"

// Results of one image's lookup, the values of the "result" label.
const (
	resultCached        = "cached"         // answered from the cache
	resultCachedFailure = "cached_failure" // a failure remembered (NegativeTTL)
	resultFetched       = "fetched"        // read from the registry
	resultFailed        = "failed"         // the registry lookup failed
	resultGaveUp        = "timeout"        // the caller stopped waiting; the lookup goes on
	resultInvalid       = "invalid"        // not an image reference
	resultTooMany       = "too_many"       // the pod names more than MaxImagesPerPod images
	resultBusy          = "busy"           // no lookup slot in time; not remembered, tried again
)

// metrics are the lookup's Prometheus metrics.
type metrics struct {
	lookups  *prometheus.CounterVec
	duration prometheus.Histogram
	entries  prometheus.GaugeFunc
}

func newMetrics(namespace string, entries func() int) *metrics {
	m := &metrics{
		lookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "image_lookups_total",
			Help: "Image architecture lookups, by result: cached, cached_failure, fetched, failed (registry error), timeout (the admission stopped waiting; the lookup goes on), invalid (not an image reference), too_many (a pod naming more than 32 distinct images, not looked up), busy (no lookup slot free in time: the registry or namespace has too many lookups in flight; not remembered).",
		}, []string{"result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "image_lookup_duration_seconds",
			Help:    "Time of one image's registry lookup (manifest, and config for a single-platform image), cache misses only.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
		entries: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: namespace, Name: "image_cache_entries",
			Help: "Answers held by the image architecture cache (failures included).",
		}, func() float64 { return float64(entries()) }),
	}
	for _, r := range []string{resultCached, resultCachedFailure, resultFetched, resultFailed, resultGaveUp, resultInvalid, resultTooMany, resultBusy} {
		m.lookups.WithLabelValues(r)
	}
	return m
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.lookups, m.duration, m.entries}
}
