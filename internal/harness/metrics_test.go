package harness

import (
	"math"
	"strings"
	"testing"
)

const sample = `# TYPE apiserver_request_total counter
apiserver_request_total{resource="leases",verb="POST",code="201"} 7
apiserver_request_total{resource="leases",verb="PUT",code="200"} 3
apiserver_request_total{resource="pods",verb="POST",code="201"} 5
# TYPE lat histogram
lat_bucket{name="a",le="0.01"} 50
lat_bucket{name="a",le="0.1"} 90
lat_bucket{name="a",le="1"} 100
lat_bucket{name="a",le="+Inf"} 100
lat_sum{name="a"} 3
lat_count{name="a"} 100
`

func TestMetricsSumAndQuantile(t *testing.T) {
	ms, err := ParseMetrics(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if got := ms.Sum("apiserver_request_total", Labels{"resource": "leases"}); got != 10 {
		t.Errorf("leases = %v, want 10", got)
	}
	if got := ms.Sum("apiserver_request_total", Labels{"verb": "!PUT"}); got != 12 {
		t.Errorf("not PUT = %v, want 12", got)
	}
	by := ms.SumBy("apiserver_request_total", "resource", nil)
	if by["pods"] != 5 || by["leases"] != 10 {
		t.Errorf("by resource = %v", by)
	}
	h := ms.Histogram("lat", Labels{"name": "a"})
	if h.Count() != 100 {
		t.Fatalf("count = %v", h.Count())
	}
	// rank 99 lies in (0.1, 1]: 9 of its 10 observations in.
	if got := h.Quantile(0.99); math.Abs(got-0.91) > 1e-9 {
		t.Errorf("p99 = %v, want 0.91", got)
	}
	if lo, hi := h.QuantileBucket(0.99); lo != 0.1 || hi != 1 {
		t.Errorf("p99 bucket = %v-%v, want 0.1-1", lo, hi)
	}
	if got, want := h.FormatQuantile(0.99), "910 ms (bucket 100-1000 ms)"; got != want {
		t.Errorf("FormatQuantile = %q, want %q", got, want)
	}
	if got := h.Sub(h).Quantile(0.5); !math.IsNaN(got) {
		t.Errorf("empty histogram p50 = %v, want NaN", got)
	}
}
