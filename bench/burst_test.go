//go:build bench

package bench

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/harness"
	"golang.org/x/sync/errgroup"
)

// writeVerbs are the verbs of apiserver_request_total that change state.
var writeVerbs = map[string]bool{"POST": true, "PUT": true, "PATCH": true, "DELETE": true, "APPLY": true, "DELETECOLLECTION": true}

// burstRun is one Deployment created at once, with or without the webhook.
type burstRun struct {
	times  burstTimes
	writes map[string]float64 // by resource[/subresource], during the burst
	reads  float64
	// admission latency histogram of the mutating webhook, as the API server saw it
	admission harness.Histogram
	// CPU seconds by component from the create call until all pods existed
	cpu map[string]float64
	// the same calls as the webhook replicas timed them, summed over the replicas
	served harness.Histogram
	// calls that failed (timeout, error) and were let through unmutated (failurePolicy Ignore)
	failOpen float64
}

// mode is what the API server calls for a burst's pods.
type mode int

const (
	withServe      mode = iota // serve: two replicas behind the proxy
	noWebhook                  // no webhook: the baseline
	withFloor                  // the floor webhook (bench/floorhook)
	withFloorWatch             // the floor, its processes caching the burst's pods
)

var modes = []mode{withServe, noWebhook, withFloor, withFloorWatch}

func (m mode) String() string { return [...]string{"serve", "none", "floor", "floor + pod cache"}[m] }

// namespace is where the mode's Deployments run: the webhook configurations select by it.
func (m mode) namespace() string { return [...]string{withNS, withoutNS, floorNS, floorWatchNS}[m] }

// hook is the name of the mode's mutating webhook in the API server's metrics.
func (m mode) hook() string { return [...]string{mutatingHook, "", floorHook, floorHook}[m] }

// bursts creates Deployments of each size in each mode, rotating which goes first,
// and prints the medians and their ratios, and the API calls per pod.
func (b *bench) bursts(ctx context.Context, t *testing.T) error {
	runs := envInt("BENCH_RUNS", 3)
	var sizes []int
	for _, s := range strings.Split(envOr("BENCH_SIZES", "200,1000"), ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			return fmt.Errorf("BENCH_SIZES: %q is not a positive number", s)
		}
		sizes = append(sizes, n)
	}
	results := map[int]map[mode][]burstRun{}
	for _, n := range sizes {
		results[n] = map[mode][]burstRun{}
	}
	for r := range runs {
		for _, n := range sizes {
			order := append(slices.Clone(modes[r%len(modes):]), modes[:r%len(modes)]...)
			for _, m := range order {
				waited, rate := waitQuiet(ctx, time.Minute)
				t.Logf("burst %d run %d %s: the machine quiet (%.2f cores) after %.0fs", n, r+1, m, rate, waited.Seconds())
				run, err := b.burst(ctx, n, m, r)
				if err != nil {
					return err
				}
				t.Logf("burst %d run %d %s: all exist %.1fs, all Running %.1fs", n, r+1, m, run.times.exist.Seconds(), run.times.running.Seconds())
				results[n][m] = append(results[n][m], run)
			}
		}
	}
	exist := func(r burstRun) float64 { return r.times.exist.Seconds() }
	running := func(r burstRun) float64 { return r.times.running.Seconds() }

	b.printf("### A Deployment created at once (median of %d alternating runs each)\n\n", runs)
	b.printf("| replicas | all pods exist, webhook | no webhook | ratio (no webhook / webhook) | all Running, webhook | no webhook | ratio | webhook p99 at the API server | at the webhook | calls failed open |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, n := range sizes {
		w, o := results[n][withServe], results[n][noWebhook]
		ew, eo := median(w, exist), median(o, exist)
		rw, ro := median(w, running), median(o, running)
		h, failOpen := admissions(w)
		var served harness.Histogram
		for _, run := range w {
			served = merge(served, run.served)
		}
		b.printf("| %d | %.1f s | %.1f s | **%.2f** | %.1f s | %.1f s | %.2f | %s | %s | %.0f of %.0f |\n", n, ew, eo, eo/ew, rw, ro, ro/rw, h.FormatQuantile(0.99), served.FormatQuantile(0.99), failOpen, h.Count())
	}
	b.printf("\nThe p99s are interpolated within their buckets (the bucket is what is known) of apiserver_admission_webhook_admission_duration_seconds, " +
		"and of the replicas' own custom_kube_scheduler_webhook_admission_duration_seconds (from reading the request to writing the answer); " +
		"calls failed open are those the API server gave up on (apiserver_admission_webhook_fail_open_count): their pods were admitted unplaced.\n\n")

	b.printf("### The floor: what any placing webhook costs the same bursts (median of %d alternating runs each)\n\n", runs)
	b.printf("The floor (bench/floorhook) is two processes that only decode each AdmissionReview and answer a seat from a counter " +
		"(no informers, no ledger, no API calls), behind the same proxy, with serve's call filters (objectSelector, CEL matchConditions): " +
		"its ratio bounds what any mutating webhook reaches on this machine with this set-up. " +
		"With a pod cache, each floor process also watches the burst's pods, as every serve replica watches the pods it placed (the ledger's record of held seats).\n\n")
	b.printf("| replicas | webhook | all pods exist | ratio (no webhook / it) | serve / it | all Running | ratio (no webhook / it) | p99 at the API server | calls failed open |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, n := range sizes {
		o, w := results[n][noWebhook], results[n][withServe]
		for _, m := range []mode{withFloor, withFloorWatch, withServe} {
			f := results[n][m]
			ef := median(f, exist)
			h, failOpen := admissions(f)
			b.printf("| %d | %s | %.1f s | **%.2f** | %.2f | %.1f s | %.2f | %s | %.0f of %.0f |\n", n, m, ef, median(o, exist)/ef, ef/median(w, exist),
				median(f, running), median(o, running)/median(f, running), h.FormatQuantile(0.99), failOpen, h.Count())
		}
	}
	b.printf("\nserve / it is its time until all pods exist over serve's: 1 means serve costs the burst no more than it.\n\n")

	b.printf("### CPU seconds from the create call until all pods exist (median of the runs, all processes on the machine)\n\n")
	b.printf("| replicas | webhook |")
	for _, c := range cpuComponents {
		b.printf(" %s |", c.name)
	}
	b.printf(" %s | all |\n|---|---|%s\n", otherCPU, strings.Repeat("---|", len(cpuComponents)+2))
	for _, n := range sizes {
		for _, m := range modes {
			runs := results[n][m]
			b.printf("| %d | %s |", n, m)
			for _, c := range cpuComponents {
				b.printf(" %.2f |", median(runs, func(r burstRun) float64 { return r.cpu[c.name] }))
			}
			b.printf(" %.2f | %.2f |\n", median(runs, func(r burstRun) float64 { return r.cpu[otherCPU] }),
				median(runs, func(r burstRun) float64 { return sumValues(r.cpu) }))
		}
	}
	b.printf("\nThe machine has %d CPUs: \"all\" close to %d × the time until all pods exist means the burst was bound by CPU, "+
		"and what the webhook adds to it (its replicas, the API server's calls to them) lengthens it.\n\n", runtime.NumCPU(), runtime.NumCPU())

	// API calls the webhook adds per placed pod: same burst with minus without the
	// webhook (the controllers' own calls cancel out), median over the runs.
	n := sizes[len(sizes)-1]
	w, o := results[n][withServe], results[n][noWebhook]
	resources := map[string]bool{}
	for _, run := range append(slices.Clone(w), o...) {
		for res := range run.writes {
			resources[res] = true
		}
	}
	type row struct {
		res           string
		perPod        float64
		with, without float64
	}
	var rows []row
	var total, webhookOnly float64
	for res := range resources {
		mw := median(w, func(r burstRun) float64 { return r.writes[res] })
		mo := median(o, func(r burstRun) float64 { return r.writes[res] })
		d := (mw - mo) / float64(n)
		total += d
		if !clusterSide[res] {
			webhookOnly += d
		}
		if math.Abs(d) >= 0.005 {
			rows = append(rows, row{res, d, mw, mo})
		}
	}
	sort.Slice(rows, func(i, j int) bool { return math.Abs(rows[i].perPod) > math.Abs(rows[j].perPod) })
	reads := (median(w, func(r burstRun) float64 { return r.reads }) - median(o, func(r burstRun) float64 { return r.reads })) / float64(n)
	b.printf("### API calls per placed pod (burst of %d, from the API server's apiserver_request_total, with minus without the webhook)\n\n", n)
	b.printf("| resource | writes with webhook | without | writes per placed pod |\n|---|---|---|---|\n")
	for _, r := range rows {
		b.printf("| %s | %.0f | %.0f | %.3f |\n", r.res, r.with, r.without, r.perPod)
	}
	b.printf("| **writes per placed pod, not by the cluster's own components** | | | **%.3f** |\n", webhookOnly)
	b.printf("| all writes | | | %.3f |\n| reads (GET, LIST) | | | %.3f |\n\n", total, reads)
	b.printf("The first of those rows leaves out what the controllers, scheduler, kwok and Karpenter write (%s): "+
		"those differ with the webhook because the pods land on other nodes. Writes on leases include the kwok nodes' heartbeats: "+
		"a difference under ±0.02 per pod is noise.\n\n", strings.Join(clusterSideList(), ", "))
	return nil
}

// admissions merges the runs' API server histograms of their webhook's calls and sums
// the calls that failed open.
func admissions(runs []burstRun) (h harness.Histogram, failOpen float64) {
	for _, run := range runs {
		h = merge(h, run.admission)
		failOpen += run.failOpen
	}
	return h, failOpen
}

// servedLatency sums the mutating webhook's admission_duration_seconds over the replicas.
func (b *bench) servedLatency(ctx context.Context) (harness.Histogram, error) {
	var h harness.Histogram
	for _, r := range b.replicas {
		m, err := r.Metrics(ctx)
		if err != nil {
			return h, err
		}
		h = merge(h, m.Histogram("custom_kube_scheduler_webhook_admission_duration_seconds", harness.Labels{"webhook": "mutate"}))
	}
	return h, nil
}

// clusterSide are resources the cluster's own components write for a burst.
var clusterSide = map[string]bool{
	"pods": true, "pods/binding": true, "pods/status": true, "events": true,
	"nodes": true, "nodes/status": true, "nodeclaims": true, "nodeclaims/status": true, "nodepools/status": true,
	"replicasets": true, "replicasets/status": true, "deployments": true, "deployments/status": true,
	"endpointslices": true,
}

func clusterSideList() []string {
	out := make([]string, 0, len(clusterSide))
	for r := range clusterSide {
		out = append(out, r)
	}
	sort.Strings(out)
	return out
}

// burst runs one Deployment of n pods in mode m's namespace.
func (b *bench) burst(ctx context.Context, n int, m mode, run int) (burstRun, error) {
	var out burstRun
	ns := m.namespace()
	name := fmt.Sprintf("burst-%d-%d", n, run+1)
	before, err := harness.APIServerMetrics(ctx, b.c.Client)
	if err != nil {
		return out, err
	}
	servedBefore, err := b.servedLatency(ctx)
	if err != nil {
		return out, err
	}
	profiled := b.profileBurst(ctx, m == withServe, n, run)
	cpuBefore := cpuSeconds()
	out.times, err = b.createAndWatch(ctx, deployment(ns, name, burstStrategy, n), true, 10*time.Minute,
		func() { out.cpu = cpuSince(cpuBefore) })
	if perr := profiled(); err == nil && perr != nil {
		err = perr
	}
	if err != nil {
		return out, err
	}
	after, err := harness.APIServerMetrics(ctx, b.c.Client)
	if err != nil {
		return out, err
	}
	out.writes = writesByResource(after)
	for res, v := range writesByResource(before) {
		out.writes[res] -= v
	}
	for _, verb := range []string{"GET", "LIST"} {
		out.reads += after.Sum("apiserver_request_total", harness.Labels{"verb": verb}) - before.Sum("apiserver_request_total", harness.Labels{"verb": verb})
	}
	sel := harness.Labels{"name": m.hook()}
	out.admission = after.Histogram("apiserver_admission_webhook_admission_duration_seconds", sel).
		Sub(before.Histogram("apiserver_admission_webhook_admission_duration_seconds", sel))
	servedAfter, err := b.servedLatency(ctx)
	if err != nil {
		return out, err
	}
	out.served = servedAfter.Sub(servedBefore)
	out.failOpen = after.Sum("apiserver_admission_webhook_fail_open_count", sel) - before.Sum("apiserver_admission_webhook_fail_open_count", sel)
	if err := b.remove(ctx, ns, name); err != nil {
		return out, err
	}
	return out, nil
}

// profileBurst starts, with BENCH_PROFILE_DIR and the webhook, a CPU profile of each
// replica covering a burst of n (2 s + 1 s per 100 pods: about until all pods exist),
// saved as cpu-<replica>-<n>-<run>.pb.gz; go tool pprof merges the files it is given.
// The returned function waits for them.
func (b *bench) profileBurst(ctx context.Context, with bool, n, run int) func() error {
	dir := os.Getenv("BENCH_PROFILE_DIR")
	if dir == "" || !with {
		return func() error { return nil }
	}
	var g errgroup.Group
	for _, s := range b.replicas {
		profile(ctx, &g, s, filepath.Join(dir, fmt.Sprintf("cpu-%s-%d-%d.pb.gz", s.Name, n, run+1)), 2+n/100)
	}
	return g.Wait
}

// profile starts, in g, a CPU profile of s for seconds, saved at path.
func profile(ctx context.Context, g *errgroup.Group, s *harness.Serve, path string, seconds int) {
	g.Go(func() error { return s.SaveProfile(ctx, "profile", fmt.Sprintf("seconds=%d", seconds), path) })
}

func sumValues(m map[string]float64) float64 {
	var s float64
	for _, v := range m {
		s += v
	}
	return s
}

func median[T any](xs []T, f func(T) float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	v := make([]float64, len(xs))
	for i, x := range xs {
		v[i] = f(x)
	}
	sort.Float64s(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// merge adds two histograms of the same buckets.
func merge(a, b harness.Histogram) harness.Histogram {
	if len(a.Bounds) == 0 {
		return b
	}
	out := harness.Histogram{Bounds: a.Bounds, Counts: slices.Clone(a.Counts)}
	for i := range out.Counts {
		if i < len(b.Counts) {
			out.Counts[i] += b.Counts[i]
		}
	}
	return out
}

// writesByResource sums apiserver_request_total's write verbs by resource[/subresource].
func writesByResource(ms harness.Metrics) map[string]float64 {
	out := map[string]float64{}
	for _, m := range ms["apiserver_request_total"].GetMetric() {
		var verb, res, sub string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "verb":
				verb = l.GetValue()
			case "resource":
				res = l.GetValue()
			case "subresource":
				sub = l.GetValue()
			}
		}
		if !writeVerbs[verb] {
			continue
		}
		if sub != "" {
			res += "/" + sub
		}
		out[res] += m.GetCounter().GetValue()
	}
	return out
}

func envOr(key, def string) string {
	if v := strings.TrimSpace(os.Getenv(key)); v != "" {
		return v
	}
	return def
}
