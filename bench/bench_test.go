//go:build bench

// Package bench is `make bench`: a benchmark of the webhook on the local cluster
// (scripts/bench.sh brings one up and always tears it down). It drives the product
// only from outside: `serve` processes (two behind a round-robin proxy, as the chart
// runs them), the registration script, the API server and /metrics. It prints
// Markdown tables; every ratio compares with a baseline measured in the same run,
// in alternating order, because the machine is shared and noisy.
//
// Settings (environment): LOCALCLUSTER_DIR (the cluster), BENCH_WEBHOOK_BIN (the
// binary; built when empty), BENCH_RUNS (runs per size and mode, default 3),
// BENCH_SIZES (default 200,1000), BENCH_LOAD_REQUESTS (per load level, default
// 2000), BENCH_MEMORY_PODS (default 5000), BENCH_SERVE_ENV (extra settings of
// serve, space-separated KEY=VALUE; default none: the chart's settings),
// BENCH_POLICIES (placement policies to create first, a tenth of them in the bench's
// namespace; default none), BENCH_OUT (also write the tables to this file), BENCH_SKIP (comma-separated
// phases to skip: burst, load, memory), BENCH_PROFILE_DIR (serve with PROFILING=on
// and save there each replica's CPU profiles of the bursts with the webhook, CPU
// profiles of serve and of the floor during the load phase's concurrency-100 runs,
// and heap profiles of the memory phase).
//
// Each burst size also runs with the floor (bench/floorhook): two processes of the
// least a placing webhook does, behind the same proxy and call filters, so the
// table shows what any mutating webhook costs a burst here beside what serve costs;
// and with the floor keeping a cache of the burst's pods (as serve's ledger must).
package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/harness"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	webhookNS = "custom-kube-scheduler-webhook" // serve's POD_NAMESPACE
	withNS    = "bench-webhook"
	withoutNS = "bench-nowebhook" // blocklisted: the API server never calls the webhook
	floorNS   = "bench-floor"     // blocklisted too: the API server calls the floor webhook instead
	// floorWatchNS is the floor's too, and its processes keep a cache of its pods.
	floorWatchNS = "bench-floor-watch"
	mutatingHook = "pods.custom-kube-scheduler-webhook.io"
	// floorHook is the floor webhook's configuration (and its one webhook's name): a copy of
	// serve's pod webhook for the floor's namespace only.
	floorHook = "pods.floor.bench.example.com"
	// The e2e capacity strategy: served by the local cluster's capacity-type pools,
	// which also take pods without a nodeSelector (the baseline).
	burstStrategy = "karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3"
	// Terms no NodePool serves: the memory phase's pods are placed and stay Pending,
	// so 5,000 of them cost no nodes.
	unservedStrategy = "bench.example.com/pool=a,weight=1:bench.example.com/pool=b,weight=1"
)

// bench is the state of one benchmark run.
type bench struct {
	c        *harness.Cluster
	repo     string
	replicas []*harness.Serve
	floors   []*harness.Serve // the floor webhook's processes
	proxy    *harness.Proxy
	out      strings.Builder
}

// blocklist is serve's BLOCKLISTED_NAMESPACE_LIST: the namespaces of the baseline and
// the floor are never sent to serve.
const blocklist = "kube-system,kube-public," + withoutNS + "," + floorNS + "," + floorWatchNS

func TestBench(t *testing.T) {
	ctx := context.Background()
	b, err := setup(ctx, t)
	if err != nil {
		t.Fatal(err)
	}
	skip := map[string]bool{}
	for _, s := range strings.Split(os.Getenv("BENCH_SKIP"), ",") {
		skip[strings.TrimSpace(s)] = true
	}
	host, _ := os.Hostname()
	b.printf("## Benchmark (`make bench`), %s, %d CPUs (%s)\n\n", time.Now().UTC().Format("2006-01-02"), runtime.NumCPU(), host)
	if n := envInt("BENCH_POLICIES", 0); n > 0 {
		b.printf("Policies in the cluster: %d (%d PlacementPolicies in the bench's namespace, the rest ClusterPlacementPolicies; none selects the bench's workloads).\n\n", n, n/10)
	}
	b.printf("serve settings: %s; 2 replicas behind a round-robin proxy unless noted. "+
		"Each burst and the load phase start once the machine's processes use under %.2f cores (at most 1 and 3 minutes' wait): "+
		"a burst leaves work behind (Karpenter removing its nodes) that would otherwise be measured with the next one.\n\n", strings.Join(serveEnv(), " "), quietCPU)
	if !skip["burst"] {
		if err := b.bursts(ctx, t); err != nil {
			t.Error(err)
		}
	}
	if !skip["load"] {
		if err := b.load(ctx, t); err != nil {
			t.Error(err)
		}
	}
	if !skip["memory"] {
		if err := b.memory(ctx, t); err != nil {
			t.Error(err)
		}
	}
	fmt.Println(b.out.String())
	if path := os.Getenv("BENCH_OUT"); path != "" {
		if err := os.WriteFile(path, []byte(b.out.String()), 0o644); err != nil {
			t.Errorf("writing %s: %v", path, err)
		}
	}
}

func (b *bench) printf(format string, args ...any) { fmt.Fprintf(&b.out, format, args...) }

func setup(ctx context.Context, t *testing.T) (*bench, error) {
	repo, err := filepath.Abs("..")
	if err != nil {
		return nil, fmt.Errorf("locating repository root: %w", err)
	}
	dir := os.Getenv("LOCALCLUSTER_DIR")
	if dir == "" {
		return nil, fmt.Errorf("LOCALCLUSTER_DIR is not set: run `make bench`")
	}
	c, err := harness.OpenCluster(dir)
	if err != nil {
		return nil, err
	}
	bin := os.Getenv("BENCH_WEBHOOK_BIN")
	if bin == "" {
		if bin, err = goBuild(ctx, t, repo, "./cmd/custom-kube-scheduler-webhook"); err != nil {
			return nil, err
		}
	}
	floorBin, err := goBuild(ctx, t, repo, "./bench/floorhook")
	if err != nil {
		return nil, err
	}
	for _, ns := range []string{webhookNS, withNS, withoutNS, floorNS, floorWatchNS} {
		// Opted in (the default scope); the blocklisted ones stay excluded by the blocklist.
		labels := map[string]string{strategy.LabelNamespaceEnabled: "true"}
		_, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating namespace %s: %w", ns, err)
		}
	}
	if n := envInt("BENCH_POLICIES", 0); n > 0 {
		// Before serve starts: its policy caches sync with them.
		if err := createPolicies(ctx, c, n); err != nil {
			return nil, err
		}
	}
	b := &bench{c: c, repo: repo}
	port := c.WebhookPort()
	for i := range 2 {
		s := c.NewServe(bin, fmt.Sprintf("webhook-bench-%d", i+1), port+i, serveEnv()...)
		if err := s.Start(ctx); err != nil {
			return nil, err
		}
		b.replicas = append(b.replicas, s)
		t.Cleanup(func() {
			if err := s.Stop(); err != nil {
				t.Errorf("stopping %s: %v", s.Name, err)
			}
		})
	}
	if b.proxy, err = c.StartProxy(port+2, port, port+1); err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = b.proxy.Close(ctx)
	})
	if err := b.register(ctx, port+2); err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = b.runScript(context.Background(), "register-webhook.sh", port+2, "delete") })
	if err := b.startFloor(ctx, t, floorBin, port+3); err != nil {
		return nil, err
	}
	return b, nil
}

// goBuild builds pkg of the repository into the test's temporary directory.
func goBuild(ctx context.Context, t *testing.T, repo, pkg string) (string, error) {
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg)
	build.Dir, build.Stdout, build.Stderr = repo, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("building %s: %w", pkg, err)
	}
	return bin, nil
}

// serve's memory limit and Go runtime settings as the chart sets them: GOGC from
// gcPercent, GOMEMLIMIT 75% of the memory limit.
const (
	chartMemoryLimit = 256 << 20
	chartGOGC        = "GOGC=400"
	chartGOMEMLIMIT  = "GOMEMLIMIT=192MiB"
)

// serveEnv is serve's configuration for the benchmark.
func serveEnv() []string {
	extra := os.Getenv("BENCH_SERVE_ENV")
	env := []string{
		chartGOGC, chartGOMEMLIMIT,
		"LOG_LEVEL=info",
		"BLOCKLISTED_NAMESPACE_LIST=" + blocklist,
		"POD_NAMESPACE=" + webhookNS,
	}
	if os.Getenv("BENCH_PROFILE_DIR") != "" {
		env = append(env, "PROFILING=on")
	}
	return append(env, strings.Fields(extra)...)
}

func (b *bench) register(ctx context.Context, port int) error {
	return b.runScript(ctx, "register-webhook.sh", port)
}

func (b *bench) runScript(ctx context.Context, script string, port int, args ...string) error {
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(b.repo, "scripts", "localcluster", script)}, args...)...)
	cmd.Env = append(os.Environ(),
		"LOCALCLUSTER_DIR="+b.c.Dir,
		fmt.Sprintf("WEBHOOK_PORT=%d", port),
		"WEBHOOK_FILTERS=full",
		"BLOCKLISTED_NAMESPACE_LIST="+blocklist,
	)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w", script, err)
	}
	return nil
}

func envInt(key string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(key)); err == nil && v > 0 {
		return v
	}
	return def
}
