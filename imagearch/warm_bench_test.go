package imagearch

import (
	"context"
	"io"
	"log"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
	corev1 "k8s.io/api/core/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/testregistry"
)

// BenchmarkWarmPodLookup is what an admission asks of the package once the cache holds
// its images: a pod of two containers (a multi-arch index and a single image, read
// once from go-containerregistry's in-memory registry) turned into a request and
// answered. It touches no registry, so it measures what the guard adds to the warm path.
func BenchmarkWarmPodLookup(b *testing.B) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	b.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	testregistry.PushIndex(b, host+"/multi:1", testregistry.MultiArchIndex(b, "amd64", "arm64"))
	testregistry.PushImage(b, host+"/single:1", testregistry.PlatformImage(b, "amd64"))
	spec := &corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "init", Image: host + "/single:1"}},
		Containers:     []corev1.Container{{Name: "app", Image: host + "/multi:1"}},
	}
	r := New(Config{Insecure: []string{host}})
	ctx := context.Background()
	if got, err := r.Architectures(ctx, PodRequest("ns", spec)); err != nil || len(got) != 1 || got[0] != "amd64" {
		b.Fatalf("filling the cache: %v, %v", got, err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := r.Architectures(ctx, PodRequest("ns", spec)); err != nil {
			b.Fatal(err)
		}
	}
}
