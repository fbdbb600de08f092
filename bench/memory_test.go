//go:build bench

package bench

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"
)

// memory compares serve's heap and RSS with no placed pod and with
// BENCH_MEMORY_PODS placed (Pending, on terms no NodePool serves) pods in its cache.
// The replica is restarted first so that earlier phases leave nothing behind.
func (b *bench) memory(ctx context.Context, t *testing.T) error {
	n := envInt("BENCH_MEMORY_PODS", 5000)
	s := b.replicas[0]
	if err := s.Stop(); err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	heap0, live0, rss0, err := b.sampleMemory(ctx)
	if err != nil {
		return err
	}
	name := fmt.Sprintf("memory-%d", n)
	d := deployment(withNS, name, unservedStrategy, n)
	times, err := b.createAndWatch(ctx, d, false, 15*time.Minute, nil)
	if err != nil {
		return err
	}
	t.Logf("memory: %d placed pods exist after %.1fs", n, times.exist.Seconds())
	heapN, liveN, rssN, err := b.sampleMemory(ctx)
	if err != nil {
		return err
	}
	b.printf("### Memory of one serve replica (lowest of 5 scrapes of /metrics)\n\n")
	b.printf("Live heap: the heap marked live at the last GC (go_memstats_next_gc_bytes / (1 + go_gc_gogc_percent/100)); heap: go_memstats_heap_alloc_bytes (live and garbage); RSS: process_resident_memory_bytes.\n\n")
	b.printf("| placed pods in the cache | live heap | heap | RSS |\n|---|---|---|---|\n")
	b.printf("| 0 | %s | %s | %s |\n| %d | %s | %s | %s |\n", mib(live0), mib(heap0), mib(rss0), n, mib(liveN), mib(heapN), mib(rssN))
	b.printf("| **per cached pod** | **%.2f KiB** | %.2f KiB | %.2f KiB |\n\n",
		(liveN-live0)/float64(n)/1024, (heapN-heap0)/float64(n)/1024, (rssN-rss0)/float64(n)/1024)
	return b.remove(ctx, withNS, name)
}

// sampleMemory waits for things to settle and returns the lowest heap, live heap
// and RSS of five scrapes a second apart.
func (b *bench) sampleMemory(ctx context.Context) (heap, live, rss float64, err error) {
	time.Sleep(10 * time.Second)
	heap, live, rss = math.Inf(1), math.Inf(1), math.Inf(1)
	for range 5 {
		ms, err := b.replicas[0].Metrics(ctx)
		if err != nil {
			return 0, 0, 0, err
		}
		heap = math.Min(heap, ms.Sum("go_memstats_heap_alloc_bytes", nil))
		// The GC's goal is the live heap after the last cycle times 1 + GOGC/100.
		gogc := ms.Sum("go_gc_gogc_percent", nil)
		if gogc <= 0 {
			return 0, 0, 0, fmt.Errorf("serve reports GOGC %v: the live heap cannot be told from the GC's goal", gogc)
		}
		live = math.Min(live, ms.Sum("go_memstats_next_gc_bytes", nil)/(1+gogc/100))
		rss = math.Min(rss, ms.Sum("process_resident_memory_bytes", nil))
		time.Sleep(time.Second)
	}
	return heap, live, rss, nil
}

func mib(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }
