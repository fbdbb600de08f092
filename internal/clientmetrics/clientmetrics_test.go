package clientmetrics

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// A client built from an instrumented config counts its requests by code, method and
// host, and observes their latency by verb; so does a client of a copied config.
func TestInstrumentCountsRequests(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/missing") {
			http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"Namespace","apiVersion":"v1","metadata":{"name":"a"}}`))
	}))
	defer srv.Close()
	reg := prometheus.NewRegistry()
	m := New()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	cfg := &rest.Config{Host: srv.URL}
	m.Instrument(cfg)
	client := kubernetes.NewForConfigOrDie(rest.CopyConfig(cfg))
	ctx := context.Background()
	if _, err := client.CoreV1().Namespaces().Get(ctx, "a", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Namespaces().Get(ctx, "missing", metav1.GetOptions{}); err == nil {
		t.Fatal("GET of a missing namespace succeeded")
	}
	host := strings.TrimPrefix(srv.URL, "http://")
	if got := testutil.ToFloat64(m.requests.WithLabelValues("200", "GET", host)); got != 1 {
		t.Errorf("rest_client_requests_total{code=200,method=GET} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("404", "GET", host)); got != 1 {
		t.Errorf("rest_client_requests_total{code=404,method=GET} = %v, want 1", got)
	}
	if n := testutil.CollectAndCount(m.latency); n != 1 {
		t.Errorf("rest_client_request_duration_seconds has %d series, want 1 (GET, %s)", n, host)
	}
	if err := m.Register(reg); err == nil {
		t.Error("registering the metrics twice on one registry succeeded")
	}
}
