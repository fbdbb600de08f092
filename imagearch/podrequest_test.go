package imagearch

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TestPodRequestIsLinearAndCapped: a pod of 60,000 containers (about 2.4 MB, inside the
// admission body limit) keeps at most MaxImagesPerPod+1 images and says there are
// more; the resolver answers it errTooManyImages without a lookup.
func TestPodRequestIsLinearAndCapped(t *testing.T) {
	const n = 60_000
	distinct := &corev1.PodSpec{}
	same := &corev1.PodSpec{}
	for i := range n {
		distinct.Containers = append(distinct.Containers, corev1.Container{Image: fmt.Sprintf("registry.example.com/app:%d", i)})
		same.Containers = append(same.Containers, corev1.Container{Image: "registry.example.com/app:1"})
	}
	start := time.Now()
	req := PodRequest("ns", distinct)
	t.Logf("PodRequest of %d distinct images: %s (logged, not asserted)", n, time.Since(start))
	if !req.MoreImages || len(req.Images) != MaxImagesPerPod+1 {
		t.Fatalf("%d distinct images: MoreImages %v, %d kept; want true, %d", n, req.MoreImages, len(req.Images), MaxImagesPerPod+1)
	}
	if r := PodRequest("ns", same); r.MoreImages || len(r.Images) != 1 {
		t.Fatalf("%d copies of one image: %+v", n, r.Images)
	}
	// Exactly the cap is looked up; one more is not.
	atCap := &corev1.PodSpec{Containers: distinct.Containers[:MaxImagesPerPod]}
	if r := PodRequest("ns", atCap); r.MoreImages || len(r.Images) != MaxImagesPerPod {
		t.Fatalf("%d images: MoreImages %v, %d kept", MaxImagesPerPod, r.MoreImages, len(r.Images))
	}
	res := New(Config{})
	if _, err := res.Architectures(context.Background(), req); !errors.Is(err, errTooManyImages) {
		t.Fatalf("a pod of %d images: %v, want errTooManyImages", n, err)
	}
	if res.CacheEntries() != 0 {
		t.Fatal("a pod over the cap was looked up")
	}
}
