// Package clientmetrics exposes client-go's REST client metrics under the names the
// Kubernetes components use (rest_client_requests_total, by code, method and host;
// rest_client_request_duration_seconds, by verb and host), measured at the transport of
// the clients' rest.Config.
//
// Why a transport and not client-go's k8s.io/client-go/tools/metrics.Register: that
// registration is once per process, and controller-runtime's pkg/metrics (linked in
// through certwatcher) already makes it in its init, with only a result counter, on its
// own global registry. Wrapping the transport keeps the metrics on the caller's
// registry, with no global state, and counts every attempt the way client-go does (a
// retried request is counted per try).
package clientmetrics

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
)

// Metrics are the REST client metrics of the clients built from Instrument-ed configs.
type Metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

// New creates the metrics; Register puts them on a registry.
func New() *Metrics {
	return &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rest_client_requests_total",
			Help: "Number of HTTP requests of the Kubernetes clients, partitioned by status code, method, and host.",
		}, []string{"code", "method", "host"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "rest_client_request_duration_seconds",
			Help: "Request latency of the Kubernetes clients in seconds (until the response headers), broken down by verb and host.",
			// client-go's (component-base's) buckets.
			Buckets: []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0},
		}, []string{"verb", "host"}),
	}
}

// Register registers the metrics on reg.
func (m *Metrics) Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.requests, m.latency} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register REST client metrics: %w", err)
		}
	}
	return nil
}

// Instrument makes every client built from cfg (and from its copies) count its
// requests on m. It keeps any transport wrapper cfg already has.
func (m *Metrics) Instrument(cfg *rest.Config) {
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &roundTripper{next: rt, m: m} })
}

type roundTripper struct {
	next http.RoundTripper
	m    *Metrics
}

func (t *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := t.next.RoundTrip(req)
	host := req.URL.Host
	t.m.latency.WithLabelValues(req.Method, host).Observe(time.Since(start).Seconds())
	// As client-go: "<error>" when no response came back.
	code := "<error>"
	if err == nil {
		code = strconv.Itoa(resp.StatusCode)
	}
	t.m.requests.WithLabelValues(code, req.Method, host).Inc()
	return resp, err
}
