package imagearch

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// BenchmarkCacheMemoryPerEntry reports the heap one cached answer takes: a tag
// reference of a realistic length (an ECR repository) with two architectures, with the
// LRU's list element and map slot.
func BenchmarkCacheMemoryPerEntry(b *testing.B) {
	const n = 10000
	arches := []string{"amd64", "arm64"}
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		c := newCache(n, 1<<30)
		expires := time.Now().Add(time.Hour)
		for i := range n {
			key := fmt.Sprintf("123456789012.dkr.ecr.eu-west-1.amazonaws.com/team-%03d/service-%04d:v1.%d.0", i%100, i, i%50)
			c.put(entry{key: key, arches: append([]string(nil), arches...), expires: expires})
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "bytes/entry")
		runtime.KeepAlive(c)
	}
}
