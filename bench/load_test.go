//go:build bench

package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
	"time"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/harness"
	"golang.org/x/sync/errgroup"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// load sends AdmissionReviews over HTTPS straight to one serve (no proxy, no API
// server): concurrency 1, 10 and 100, dry-run and real; then 5,000 real admissions
// of one fresh revision against ten fresh revisions of 500, to compare the cost per
// request by revision size.
func (b *bench) load(ctx context.Context, t *testing.T) error {
	n := envInt("BENCH_LOAD_REQUESTS", 2000)
	// The load generator collects as rarely as serve does (the chart's GOGC), so its
	// own collections, on the same two cores, weigh less on what it measures.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	target := b.replicas[0]
	hc := b.c.HTTPClient(30 * time.Second)
	defer hc.CloseIdleConnections()

	// runAt sends requests AdmissionReviews of a fresh revision to p's /mutate.
	runAt := func(p *harness.Serve, name string, requests, concurrency int, dryRun bool) (harness.LoadResult, error) {
		bodies, cleanup, err := b.reviews(ctx, name, requests, dryRun)
		if err != nil {
			return harness.LoadResult{}, err
		}
		defer cleanup()
		var profiled errgroup.Group
		if dir := os.Getenv("BENCH_PROFILE_DIR"); dir != "" && concurrency == 100 {
			// A CPU profile of the process covering the run (idle time adds no samples).
			profile(ctx, &profiled, p, filepath.Join(dir, fmt.Sprintf("cpu-%s-%s.pb.gz", p.Name, name)), 1+requests/3000)
		}
		r := harness.Load(ctx, hc, p.URL("/mutate"), bodies, concurrency)
		if err := profiled.Wait(); err != nil {
			return r, err
		}
		t.Logf("load %s: %d requests at concurrency %d: %.0f/s, p50 %s, p99 %s, max %s, failed %d %s",
			name, r.Requests, concurrency, r.Throughput(), r.Quantile(0.5), r.Quantile(0.99), r.Max(), r.Failed, r.FirstFail)
		return r, nil
	}
	run := func(name string, requests, concurrency int, dryRun bool) (harness.LoadResult, error) {
		return runAt(target, name, requests, concurrency, dryRun)
	}
	waited, rate := waitQuiet(ctx, 3*time.Minute)
	t.Logf("load: the machine quiet (%.2f cores) after %.0fs", rate, waited.Seconds())
	// Warm-up: 100 TLS connections open (the handshakes are not what is measured) and
	// the server's caches and pools filled.
	if _, err := run("warmup", 400, 100, true); err != nil {
		return err
	}
	floor := b.floors[0]
	if _, err := runAt(floor, "warmup-floor", 400, 100, false); err != nil {
		return err
	}
	// Each row is the median of loadRuns runs; the rows of one concurrency run in turn,
	// in a rotating order, so a noisy moment of the machine hits them alike.
	const loadRuns = 3
	type loadRow struct {
		mode        string
		concurrency int
	}
	var rows []loadRow
	for _, c := range []int{1, 10, 100} {
		for _, m := range []string{"dry-run", "real", "floor"} {
			rows = append(rows, loadRow{m, c})
		}
	}
	results := map[loadRow][]harness.LoadResult{}
	for r := range loadRuns {
		for i := 0; i < len(rows); i += 3 {
			for k := range 3 {
				row := rows[i+(k+r)%3]
				p := target
				if row.mode == "floor" {
					p = floor
				}
				res, err := runAt(p, fmt.Sprintf("lg-%s-c%d-%d", row.mode, row.concurrency, r+1), n, row.concurrency, row.mode == "dry-run")
				if err != nil {
					return err
				}
				results[row] = append(results[row], res)
			}
		}
	}
	b.printf("### AdmissionReviews over HTTPS straight to one process (%d requests per run, median of %d runs in rotating order, load generator on the same machine, GOGC 400 as serve)\n\n", n, loadRuns)
	b.printf("| mode | concurrency | throughput | p50 | p99 | max | failed |\n|---|---|---|---|---|---|---|\n")
	quantile := func(q float64) func(harness.LoadResult) float64 {
		return func(r harness.LoadResult) float64 { return float64(r.Quantile(q)) }
	}
	for _, m := range []string{"dry-run", "real", "floor"} {
		for _, c := range []int{1, 10, 100} {
			rs := results[loadRow{m, c}]
			failed := 0
			for _, r := range rs {
				failed += r.Failed
			}
			b.printf("| %s | %d | %.0f/s | %s | %s | %s | %d |\n", m, c, median(rs, harness.LoadResult.Throughput),
				dur(time.Duration(median(rs, quantile(0.5)))), dur(time.Duration(median(rs, quantile(0.99)))),
				dur(time.Duration(median(rs, func(r harness.LoadResult) float64 { return float64(r.Max()) }))), failed)
		}
	}
	b.printf("\ndry-run and real go to one serve; floor: the same real AdmissionReviews to one process of the benchmark's floor webhook (bench/floorhook: " +
		"decode, a seat from a counter, a patch), the least a placing webhook does: what the machine gives any webhook at that concurrency.\n\n")
	// Revisions of 500 against one of 5,000, for the same 5,000 requests: ten revisions
	// of 500 one after the other, so both runs last as long and pay the same garbage
	// collections (a lone run of 500 lasts under 0.1 s and often ends before the
	// collector's next cycle, which made it look cheaper than it is). Alternating, three
	// runs each, medians compared.
	const sizeRuns, large, small = 3, 5000, 500
	manySmall := func(name string) (harness.LoadResult, error) {
		var bodies [][]byte
		for k := range large / small {
			bs, cleanup, err := b.reviews(ctx, fmt.Sprintf("%s-%d", name, k), small, false)
			if err != nil {
				return harness.LoadResult{}, err
			}
			defer cleanup()
			bodies = append(bodies, bs...)
		}
		r := harness.Load(ctx, hc, target.URL("/mutate"), bodies, 100)
		t.Logf("load %s: %d revisions of %d at concurrency 100: %.0f/s, p99 %s, failed %d %s",
			name, large/small, small, r.Throughput(), r.Quantile(0.99), r.Failed, r.FirstFail)
		return r, nil
	}
	var smalls, larges []harness.LoadResult
	for i := range sizeRuns {
		for j := range 2 {
			var (
				r   harness.LoadResult
				err error
			)
			if (i+j)%2 == 0 {
				r, err = manySmall(fmt.Sprintf("lg-real-%dx%d-%d", large/small, small, i+1))
				smalls = append(smalls, r)
			} else {
				r, err = run(fmt.Sprintf("lg-real-%d-%d", large, i+1), large, 100, false)
				larges = append(larges, r)
			}
			if err != nil {
				return err
			}
		}
	}
	perRequest := func(r harness.LoadResult) float64 { return float64(r.PerRequest()) }
	p99 := func(r harness.LoadResult) float64 { return float64(r.Quantile(0.99)) }
	b.printf("### Real admissions at concurrency 100: cost per request by revision size (median of %d alternating runs)\n\n", sizeRuns)
	b.printf("| admissions | throughput | per request | p99 | failed |\n|---|---|---|---|---|\n")
	for _, row := range []struct {
		name string
		rs   []harness.LoadResult
	}{{fmt.Sprintf("%d revisions of %d", large/small, small), smalls}, {fmt.Sprintf("1 revision of %d", large), larges}} {
		failed := 0
		for _, r := range row.rs {
			failed += r.Failed
		}
		b.printf("| %s | %.0f/s | %s | %s | %d |\n", row.name, median(row.rs, harness.LoadResult.Throughput),
			dur(time.Duration(median(row.rs, perRequest))), dur(time.Duration(median(row.rs, p99))), failed)
	}
	b.printf("| ratio 5,000 / 500 | | **%.2f** | | |\n\n", median(larges, perRequest)/median(smalls, perRequest))
	return nil
}

// reviews creates a Deployment of 0 replicas (so its ReplicaSet, the pods' owner,
// is real and cached by the webhook) and returns n AdmissionReviews of new pods of it.
// cleanup deletes the Deployment.
func (b *bench) reviews(ctx context.Context, name string, n int, dryRun bool) ([][]byte, func(), error) {
	d := deployment(withNS, name, burstStrategy, 0)
	if _, err := b.c.Client.AppsV1().Deployments(withNS).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		return nil, nil, fmt.Errorf("creating deployment %s: %w", name, err)
	}
	cleanup := func() {
		bg := metav1.DeletePropagationBackground
		_ = b.c.Client.AppsV1().Deployments(withNS).Delete(context.Background(), name, metav1.DeleteOptions{PropagationPolicy: &bg})
	}
	var rs *appsv1.ReplicaSet
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := b.c.Client.AppsV1().ReplicaSets(withNS).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil || len(list.Items) == 0 {
			return false, nil
		}
		rs = &list.Items[0]
		return true, nil
	})
	if err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("waiting for the ReplicaSet of %s: %w", name, err)
	}
	// Let both replicas' caches see the new ReplicaSet before timing.
	time.Sleep(time.Second)
	bodies := make([][]byte, n)
	for i := range bodies {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name:            fmt.Sprintf("%s-%d", rs.Name, i),
				Namespace:       withNS,
				Labels:          rs.Spec.Template.Labels,
				Annotations:     rs.Spec.Template.Annotations,
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(rs, appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))},
			},
			Spec: rs.Spec.Template.Spec,
		}
		if bodies[i], err = harness.PodReview(pod, fmt.Sprintf("%s-%s-%d", name, rs.UID, i), dryRun); err != nil {
			cleanup()
			return nil, nil, err
		}
	}
	return bodies, cleanup, nil
}

// dur renders a duration in ms with two decimals.
func dur(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }
