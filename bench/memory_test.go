//go:build bench

package bench

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/harness"
	"golang.org/x/sync/errgroup"
)

// chartReservationTTL is serve's RESERVATION_TTL as the chart sets it (its default).
const chartReservationTTL = 30 * time.Second

const (
	// revisionsTaken is the ledger's count of revisions whose seats a replica took.
	revisionsTaken = "custom_kube_scheduler_webhook_seat_revisions_taken_total"
	// convergeLeader is 1 on the replica running the convergence loop.
	convergeLeader = "custom_kube_scheduler_webhook_converge_leader"
)

// memorySample is what sampleMemory read from one replica.
type memorySample struct{ heap, live, rss float64 }

// memory compares each serve replica's heap and RSS with no placed pod and with
// BENCH_MEMORY_PODS placed (Pending, on terms no NodePool serves) pods in its cache.
// Both replicas are measured: they cache the same pods, but the one that owns the
// revision's seats also answered every claim, and what a burst leaves in its ledger
// is part of the cost. The replicas are restarted first so that earlier phases leave
// nothing behind.
func (b *bench) memory(ctx context.Context, t *testing.T) error {
	n := envInt("BENCH_MEMORY_PODS", 5000)
	for _, s := range b.replicas {
		if err := s.Stop(); err != nil {
			return err
		}
		if err := s.Start(ctx); err != nil {
			return err
		}
	}
	before, err := b.sampleReplicas(ctx, 0)
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
	after, err := b.sampleReplicas(ctx, n)
	if err != nil {
		return err
	}
	b.printf("### Memory of each serve replica (after a collection once it settled, and with %d pods once the admissions' reservations expired)\n\n", n)
	b.printf("Live heap: go_gc_heap_live_bytes, what that collection marked live; heap: go_memstats_heap_alloc_bytes (live and garbage) and RSS: process_resident_memory_bytes, the lowest of 5 scrapes a second apart. " +
		"The seat owner is the replica that took the revision's seats and answered every claim (the other forwarded its admissions' claims to it); the convergence leader runs the loop that watches placed pods (a pass over a revision when it changes).\n\n")
	b.printf("| replica | placed pods in the cache | live heap | heap | RSS |\n|---|---|---|---|---|\n")
	worst := 0.0
	for i, s := range b.replicas {
		var roles []string
		if after[i].owner {
			roles = append(roles, "seat owner")
		}
		if after[i].leader {
			roles = append(roles, "convergence leader")
		}
		role := strings.Join(roles, ", ")
		if role == "" {
			role = "forwarder"
		}
		x, y := before[i].memorySample, after[i].memorySample
		perPod := (y.live - x.live) / float64(n) / 1024
		worst = math.Max(worst, perPod)
		b.printf("| %s (%s) | 0 | %s | %s | %s |\n", s.Name, role, mib(x.live), mib(x.heap), mib(x.rss))
		b.printf("| | %d | %s | %s | %s |\n", n, mib(y.live), mib(y.heap), mib(y.rss))
		b.printf("| | **per cached pod** | **%.2f KiB** | %.2f KiB | %.2f KiB |\n",
			perPod, (y.heap-x.heap)/float64(n)/1024, (y.rss-x.rss)/float64(n)/1024)
	}
	b.printf("\nLive heap per cached pod, the larger of the two replicas: **%.2f KiB**.\n\n", worst)
	return b.remove(ctx, withNS, name)
}

// replicaMemory is one replica's memory and roles: whether it owns a revision's seats
// and leads the convergence loop.
type replicaMemory struct {
	memorySample
	owner, leader bool
}

// sampleReplicas samples every replica at once, after the machine settled, and with
// BENCH_PROFILE_DIR saves their heap profiles there (heap-<replica>-<pods>.pb.gz).
func (b *bench) sampleReplicas(ctx context.Context, pods int) ([]replicaMemory, error) {
	time.Sleep(10 * time.Second)
	waitQuiet(ctx, time.Minute)
	out := make([]replicaMemory, len(b.replicas))
	var g errgroup.Group
	for i, s := range b.replicas {
		g.Go(func() error {
			m, ms, err := sampleMemory(ctx, s)
			if err != nil {
				return fmt.Errorf("%s: %w", s.Name, err)
			}
			out[i] = replicaMemory{memorySample: m, owner: ms.Sum(revisionsTaken, nil) > 0, leader: ms.Sum(convergeLeader, nil) > 0}
			if dir := os.Getenv("BENCH_PROFILE_DIR"); dir != "" {
				return s.SaveProfile(ctx, "heap", "gc=1", filepath.Join(dir, fmt.Sprintf("heap-%s-%d.pb.gz", s.Name, pods)))
			}
			return nil
		})
	}
	return out, g.Wait()
}

// sampleMemory waits for a garbage collection, then returns the live heap that
// collection found, and the lowest heap and RSS of five scrapes a second apart, with
// the last scrape. An idle replica collects at least every two minutes (the Go
// runtime forces it), and at GOGC 400 may not have collected at all since it started:
// waiting for a fresh collection is what makes the live heap mean something.
func sampleMemory(ctx context.Context, s *harness.Serve) (memorySample, harness.Metrics, error) {
	const lastGC = "go_memstats_last_gc_time_seconds"
	ms, err := s.Metrics(ctx)
	if err != nil {
		return memorySample{}, nil, err
	}
	if _, ok := ms["go_gc_heap_live_bytes"]; !ok {
		return memorySample{}, nil, fmt.Errorf("serve does not report go_gc_heap_live_bytes")
	}
	settled := ms.Sum(lastGC, nil)
	deadline := time.Now().Add(3 * time.Minute)
	for ms.Sum(lastGC, nil) <= settled {
		if time.Now().After(deadline) {
			return memorySample{}, nil, fmt.Errorf("serve did not collect garbage within 3 minutes of settling")
		}
		time.Sleep(2 * time.Second)
		if ms, err = s.Metrics(ctx); err != nil {
			return memorySample{}, nil, err
		}
	}
	m := memorySample{live: ms.Sum("go_gc_heap_live_bytes", nil), heap: math.Inf(1), rss: math.Inf(1)}
	for range 5 {
		if ms, err = s.Metrics(ctx); err != nil {
			return memorySample{}, nil, err
		}
		m.heap = math.Min(m.heap, ms.Sum("go_memstats_heap_alloc_bytes", nil))
		m.rss = math.Min(m.rss, ms.Sum("process_resident_memory_bytes", nil))
		time.Sleep(time.Second)
	}
	return m, ms, nil
}

func mib(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }
