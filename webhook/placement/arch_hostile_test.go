package placement

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/imagearch"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook"
)

// A registry answering a 32 MiB 404 that quotes an internal secret: the pod's warning
// names the registry and the status, in a few hundred bytes, never the body (before:
// a 32 MiB warning). A pod naming more images than the cap gets one warning and no
// lookup.
func TestArchitectureWarningsNeverEchoTheRegistry(t *testing.T) {
	const marker = "INTERNAL-ONLY-RESPONSE"
	var hits atomic.Int64
	body := bytes.Repeat([]byte(`{"message":"`+marker+`"}`), (32<<20)/36)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/v2/" {
			return
		}
		hits.Add(1)
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	ia := &ImageArchitectures{Images: imagearch.New(imagearch.Config{Insecure: []string{host}}), Capacity: fakeArchCapacity{"amd64", "arm64"}, Budget: 30 * time.Second}
	term := strategy.Term{Labels: []strategy.Label{{Key: "capacity", Value: "spot"}}}

	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Image: host + "/app:1"}}}}
	v := ia.verdict(context.Background(), pod, "ns", 0, term, "Deployment ns/web")
	if v.outcome != webhook.ArchUnknown || len(v.warning) > 512 || strings.Contains(v.warning, marker) || !strings.Contains(v.warning, "registry "+host+" answered HTTP 404") {
		t.Fatalf("outcome %s, warning of %d bytes: %.300q", v.outcome, len(v.warning), v.warning)
	}

	many := &corev1.Pod{}
	for i := range imagearch.MaxImagesPerPod + 10 {
		many.Spec.Containers = append(many.Spec.Containers, corev1.Container{Image: fmt.Sprintf("%s/app:%d", host, i)})
	}
	before := hits.Load()
	v = ia.verdict(context.Background(), many, "ns", 0, term, "Deployment ns/web")
	if v.outcome != webhook.ArchUnknown || strings.Count(v.warning, "distinct images") != 1 || hits.Load() != before {
		t.Fatalf("a pod of %d images: outcome %s, warning %q, %d lookups", len(many.Spec.Containers), v.outcome, v.warning, hits.Load()-before)
	}
}
