package harness

import (
	"context"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
)

// Metrics is one scrape of a Prometheus text endpoint, by metric family name.
type Metrics map[string]*dto.MetricFamily

// ParseMetrics reads the Prometheus text format.
func ParseMetrics(r io.Reader) (Metrics, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parsing metrics: %w", err)
	}
	return Metrics(fams), nil
}

// APIServerMetrics scrapes the API server's /metrics through the client.
func APIServerMetrics(ctx context.Context, client kubernetes.Interface) (Metrics, error) {
	body, err := client.CoreV1().RESTClient().Get().AbsPath("/metrics").Stream(ctx)
	if err != nil {
		return nil, fmt.Errorf("scraping the API server's /metrics: %w", err)
	}
	defer body.Close()
	return ParseMetrics(body)
}

// Labels selects series: every given label must have the given value ("" matches
// a missing label); a value starting with "!" excludes that value instead.
type Labels map[string]string

func (l Labels) match(m *dto.Metric) bool {
	got := make(map[string]string, len(m.GetLabel()))
	for _, lp := range m.GetLabel() {
		got[lp.GetName()] = lp.GetValue()
	}
	for k, v := range l {
		if neg, ok := strings.CutPrefix(v, "!"); ok {
			if got[k] == neg {
				return false
			}
		} else if got[k] != v {
			return false
		}
	}
	return true
}

// value is a counter's, gauge's or untyped metric's value.
func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return 0
}

// Sum adds the values of the series of name that match sel.
func (ms Metrics) Sum(name string, sel Labels) float64 {
	var sum float64
	for _, m := range ms[name].GetMetric() {
		if sel.match(m) {
			sum += value(m)
		}
	}
	return sum
}

// SumBy adds the values of the series of name that match sel, grouped by the
// value of label.
func (ms Metrics) SumBy(name, label string, sel Labels) map[string]float64 {
	out := map[string]float64{}
	for _, m := range ms[name].GetMetric() {
		if !sel.match(m) {
			continue
		}
		key := ""
		for _, lp := range m.GetLabel() {
			if lp.GetName() == label {
				key = lp.GetValue()
			}
		}
		out[key] += value(m)
	}
	return out
}

// Histogram is a cumulative histogram: bucket upper bounds and counts.
type Histogram struct {
	Bounds []float64 // ascending, the last is +Inf
	Counts []float64 // cumulative
}

// Histogram merges the histograms of name whose series match sel.
func (ms Metrics) Histogram(name string, sel Labels) Histogram {
	byBound := map[float64]float64{}
	for _, m := range ms[name].GetMetric() {
		if m.Histogram == nil || !sel.match(m) {
			continue
		}
		for _, b := range m.Histogram.GetBucket() {
			if !math.IsInf(b.GetUpperBound(), 1) { // the sample count is +Inf's
				byBound[b.GetUpperBound()] += float64(b.GetCumulativeCount())
			}
		}
		byBound[math.Inf(1)] += float64(m.Histogram.GetSampleCount())
	}
	var h Histogram
	for b := range byBound {
		h.Bounds = append(h.Bounds, b)
	}
	sort.Float64s(h.Bounds)
	for _, b := range h.Bounds {
		h.Counts = append(h.Counts, byBound[b])
	}
	return h
}

// Sub is the histogram of the observations made since before (same buckets).
func (h Histogram) Sub(before Histogram) Histogram {
	prev := map[float64]float64{}
	for i, b := range before.Bounds {
		prev[b] = before.Counts[i]
	}
	out := Histogram{Bounds: h.Bounds, Counts: make([]float64, len(h.Counts))}
	for i, b := range h.Bounds {
		out.Counts[i] = h.Counts[i] - prev[b]
	}
	return out
}

// Count is the number of observations.
func (h Histogram) Count() float64 {
	if len(h.Counts) == 0 {
		return 0
	}
	return h.Counts[len(h.Counts)-1]
}

// Quantile estimates the q-quantile as Prometheus's histogram_quantile does
// (linear within the bucket); NaN without observations. Above the largest finite
// bound it returns that bound.
func (h Histogram) Quantile(q float64) float64 {
	total := h.Count()
	if total == 0 {
		return math.NaN()
	}
	rank := q * total
	lower, prevCount := 0.0, 0.0
	for i, b := range h.Bounds {
		if h.Counts[i] >= rank {
			if math.IsInf(b, 1) {
				return lower
			}
			if h.Counts[i] == prevCount {
				return b
			}
			return lower + (b-lower)*(rank-prevCount)/(h.Counts[i]-prevCount)
		}
		lower, prevCount = b, h.Counts[i]
	}
	return lower
}

// QuantileBucket returns the bounds of the bucket the q-quantile falls in: all a
// histogram knows for sure (lower is 0 for the first bucket; upper is +Inf past the
// largest finite bound).
func (h Histogram) QuantileBucket(q float64) (lower, upper float64) {
	rank := q * h.Count()
	for i, b := range h.Bounds {
		if h.Counts[i] >= rank {
			return lower, b
		}
		lower = b
	}
	return lower, math.Inf(1)
}

// FormatQuantile renders the q-quantile in milliseconds with its bucket, e.g.
// "495 ms (100-500 ms)", or "n/a" without observations.
func (h Histogram) FormatQuantile(q float64) string {
	if h.Count() == 0 {
		return "n/a"
	}
	lo, hi := h.QuantileBucket(q)
	upper := "+Inf"
	if !math.IsInf(hi, 1) {
		upper = fmt.Sprintf("%g", hi*1000)
	}
	return fmt.Sprintf("%.0f ms (bucket %g-%s ms)", h.Quantile(q)*1000, lo*1000, upper)
}
