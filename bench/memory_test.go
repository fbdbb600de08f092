//go:build bench

package bench

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"
)

// chartReservationTTL is serve's RESERVATION_TTL as the chart sets it (its default).
const chartReservationTTL = 30 * time.Second

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
	// What the burst of admissions left is not per cached pod: the owner of the
	// revision remembers its reservations for the reservation TTL and the ids of
	// fulfilled ones for twice that, and drops them at its next sweep (every TTL).
	time.Sleep(3 * chartReservationTTL)
	heapN, liveN, rssN, err := b.sampleMemory(ctx)
	if err != nil {
		return err
	}
	b.printf("### Memory of one serve replica (after a collection once it settled, and with 5,000 pods once the admissions' reservations expired)\n\n")
	b.printf("Live heap: go_gc_heap_live_bytes, what that collection marked live; heap: go_memstats_heap_alloc_bytes (live and garbage) and RSS: process_resident_memory_bytes, the lowest of 5 scrapes a second apart.\n\n")
	b.printf("| placed pods in the cache | live heap | heap | RSS |\n|---|---|---|---|\n")
	b.printf("| 0 | %s | %s | %s |\n| %d | %s | %s | %s |\n", mib(live0), mib(heap0), mib(rss0), n, mib(liveN), mib(heapN), mib(rssN))
	b.printf("| **per cached pod** | **%.2f KiB** | %.2f KiB | %.2f KiB |\n\n",
		(liveN-live0)/float64(n)/1024, (heapN-heap0)/float64(n)/1024, (rssN-rss0)/float64(n)/1024)
	return b.remove(ctx, withNS, name)
}

// sampleMemory waits for things to settle and for a garbage collection after that,
// then returns the live heap that collection found, and the lowest heap and RSS of
// five scrapes a second apart. An idle replica collects at least every two minutes
// (the Go runtime forces it), and at GOGC 400 may not have collected at all since it
// started: waiting for a fresh collection is what makes the live heap mean something.
func (b *bench) sampleMemory(ctx context.Context) (heap, live, rss float64, err error) {
	const lastGC = "go_memstats_last_gc_time_seconds"
	time.Sleep(10 * time.Second)
	waitQuiet(ctx, time.Minute)
	ms, err := b.replicas[0].Metrics(ctx)
	if err != nil {
		return 0, 0, 0, err
	}
	if _, ok := ms["go_gc_heap_live_bytes"]; !ok {
		return 0, 0, 0, fmt.Errorf("serve does not report go_gc_heap_live_bytes")
	}
	settled := ms.Sum(lastGC, nil)
	deadline := time.Now().Add(3 * time.Minute)
	for ms.Sum(lastGC, nil) <= settled {
		if time.Now().After(deadline) {
			return 0, 0, 0, fmt.Errorf("serve did not collect garbage within 3 minutes of settling")
		}
		time.Sleep(2 * time.Second)
		if ms, err = b.replicas[0].Metrics(ctx); err != nil {
			return 0, 0, 0, err
		}
	}
	live = ms.Sum("go_gc_heap_live_bytes", nil)
	heap, rss = math.Inf(1), math.Inf(1)
	for range 5 {
		ms, err := b.replicas[0].Metrics(ctx)
		if err != nil {
			return 0, 0, 0, err
		}
		heap = math.Min(heap, ms.Sum("go_memstats_heap_alloc_bytes", nil))
		rss = math.Min(rss, ms.Sum("process_resident_memory_bytes", nil))
		time.Sleep(time.Second)
	}
	return heap, live, rss, nil
}

func mib(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }
