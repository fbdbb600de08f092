package promcheck

import (
	"reflect"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

func TestMetrics(t *testing.T) {
	cases := map[string][]string{
		`sum(rate(a_total{x="y"}[5m])) / sum(rate(a_total[5m]))`:                                            {"a_total"},
		`histogram_quantile(0.99, sum by (le) (rate(h_bucket{namespace=~"$namespace"}[$__rate_interval])))`: {"h_bucket"},
		`max(r) < 1 or absent(s)`:             {"r", "s"},
		`{__name__="n", job="j"} - time()`:    {"n"},
		`label_values(build_info, namespace)`: {"build_info"},
	}
	for expr, want := range cases {
		got, err := Metrics(expr)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("Metrics(%q) = %v, %v; want %v", expr, got, err, want)
		}
	}
	for _, bad := range []string{`sum(rate(a[5m])`, `{job="j"}`} {
		if _, err := Metrics(bad); err == nil {
			t.Errorf("Metrics(%q): no error", bad)
		}
	}
}

func TestUnexported(t *testing.T) {
	h := dto.MetricType_HISTOGRAM
	exported := Exported([]*dto.MetricFamily{{Name: proto.String("lat_seconds"), Type: &h}})
	queries := []Query{{Where: "panel p (A)", Expr: `histogram_quantile(0.9, rate(lat_seconds_bucket[5m]))`}}
	if err := Unexported(queries, exported, nil); err != nil {
		t.Errorf("a histogram's _bucket series: %v", err)
	}
	queries = append(queries, Query{Where: "alert X", Expr: `rate(gone_total[5m]) > 0`})
	err := Unexported(queries, exported, nil)
	if err == nil || !strings.Contains(err.Error(), "alert X uses gone_total") {
		t.Errorf("an unexported metric: %v", err)
	}
	if err := Unexported(queries, exported, map[string]bool{"gone_total": true}); err != nil {
		t.Errorf("an allowed metric: %v", err)
	}
}

func TestDashboardQueries(t *testing.T) {
	dash := `{"panels": [
		{"title": "A", "targets": [{"refId": "A", "expr": "rate(a_total[5m])"}]},
		{"title": "Row", "type": "row", "panels": [{"title": "B", "targets": [{"refId": "B", "expr": "b"}]}]}],
	  "templating": {"list": [{"name": "namespace", "type": "query", "query": {"query": "label_values(c, namespace)"}},
		{"name": "datasource", "type": "datasource", "query": "prometheus"}]}}`
	qs, err := DashboardQueries([]byte(dash))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, q := range qs {
		got = append(got, q.Expr)
	}
	if want := []string{"rate(a_total[5m])", "b", "label_values(c, namespace)"}; !reflect.DeepEqual(got, want) {
		t.Errorf("queries %q, want %q", got, want)
	}
	if _, err := DashboardQueries([]byte(`{"panels": [{"title": "empty"}]}`)); err == nil || !strings.Contains(err.Error(), `panel "empty" has no query`) {
		t.Errorf("a panel without a query: %v", err)
	}
}
